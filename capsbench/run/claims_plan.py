"""`capsbench run suite=claims`: exactly the units the chosen claims need, as units of the ordinary suites (the same
settings give the same unit keys and checkpoints, so nothing an ordinary run measured is measured again), the claims
whose data files are absent (with the files and where to get them), and the claims whose units would take over an
hour on 2 CPU cores."""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig

from capsbench.config.compose import compose, parse_overrides
from capsbench.data.files import DATA_FILES
from capsbench.errors import CapsbenchError
from capsbench.models import MODELS
from capsbench.reporting.baselines import logged_text
from capsbench.reporting.claim_files import CLAIMS_SUITE, Claim, Side, claim_ids, load_claims
from capsbench.run.estimate import Estimate, estimate
from capsbench.run.plan import plan, unit_threads
from capsbench.run.store import UnitStore
from capsbench.run.units import UnitSpec
from capsbench.suites import CATALOG
from capsbench.util.registry import close_matches

log = logging.getLogger(__name__)
OWN_KEYS = ("claims", "one_seed_verdicts", "baselines_dir")  # read here, not by the suites
CHOSEN_BY_CLAIMS = ("models", "dataset", "model_args", "model_train")  # each claim names its own
DEFAULT_SEEDS = "[0,1,2]"
TRAINING_KEYS = {"pgd": "adversarial", "affine": "augment"}  # a side's `training` -> model_train.<model>.<key>


@dataclass(frozen=True)
class Section:
    """One composed suite config serving some claims: its suite, dataset and run settings, each model once."""

    suite: str
    dataset: str
    run: tuple[tuple[str, str], ...]  # claim `run` settings, as override text
    models: dict[str, tuple[tuple[tuple[str, str], ...], str | None]] = field(default_factory=dict)  # args, training


@dataclass
class ClaimPlan:
    """What `capsbench run suite=claims` will do, known before anything runs."""

    cfg: DictConfig  # the settings every section shares (budget, seeds, launcher, output and tracking, device)
    claims: list[Claim]  # the chosen claims, in file order
    units: dict[str, list[UnitSpec]]  # claim id -> its units (claims whose data are present)
    sections: list[tuple[DictConfig, list[UnitSpec]]]  # each composed suite config and its units
    lacking: dict[str, list[str]]  # claim id -> absent data: the files and where to get them
    downloads: dict[str, list[str]]  # claim id -> data torchvision will download first (data.download=true)
    long: dict[str, Estimate]  # claim id -> estimate, for claims over an hour on 2 CPU cores
    total: Estimate  # every unit still to run
    one_seed: bool
    overrides: list[str]

    @property
    def all_units(self) -> list[UnitSpec]:
        return list({u.key: u for units in self.units.values() for u in units}.values())


def plan_claims(overrides: list[str]) -> ClaimPlan:
    """The plan of `capsbench run suite=claims [claims=[id,...]] [seeds=...] [budget=...] ...`; bad input fails before
    torch is imported."""
    raw = parse_overrides(overrides)
    own = {k: yaml.safe_load(raw.pop(k)) for k in OWN_KEYS if k in raw}
    for key in raw:
        if key.split(".")[0] in CHOSEN_BY_CLAIMS:
            raise CapsbenchError(f"suite=claims takes the models and datasets each claim names; drop {key}= "
                                 "(choose claims with claims=[id,...])")
    if raw.pop("suite", CLAIMS_SUITE) != CLAIMS_SUITE:
        raise CapsbenchError("suite=claims runs alone; run other suites in their own command")
    raw.setdefault("seeds", DEFAULT_SEEDS)
    rest = [f"{k}={v}" for k, v in raw.items() if not k.startswith("params.")]
    params = {k: v for k, v in raw.items() if k.startswith("params.")}
    folder = Path(own["baselines_dir"]) if own.get("baselines_dir") else None
    wanted = _chosen(own, claim_ids(folder))  # before load_claims, which imports the suites (and torch)
    claims = [c for c in load_claims(folder) if wanted is None or c.id in wanted]
    base = compose([*rest, "suite=accuracy"])
    runnable, lacking, downloads = _by_data(claims, Path(base.data.root), bool(base.data.download))
    sections, placed = _sections(runnable, base)
    composed, used = [], set()
    for section in sections:
        cfg, keys = _compose(section, rest, params)
        if cfg.threads is None:  # fixed per unit, as `capsbench run` does for every launcher
            cfg.threads = unit_threads(cfg)
        used |= keys
        composed.append((cfg, plan(cfg)))
    unused = sorted(set(params) - used)
    if unused:
        raise CapsbenchError(f"{unused[0]} is a setting of no suite the chosen claims run; drop it")
    units = {
        c.id: list({u.key: u for name in ("better", "worse") for u in composed[placed[(c.id, name)]][1]
                    if u.model == getattr(c, name).model}.values())
        for c in runnable
    }
    long, everything = _estimates(runnable, units, base)
    return ClaimPlan(base, claims, units, composed, lacking, downloads, long, everything,
                     bool(own.get("one_seed_verdicts")), overrides)


def _by_data(
    claims: list[Claim], root: Path, download: bool
) -> tuple[list[Claim], dict[str, list[str]], dict[str, list[str]]]:
    """(the claims whose data are present or will be downloaded, the absent data of the others with where to get them,
    the data torchvision will download first)."""
    runnable, lacking, downloads = [], {}, {}
    for claim in claims:
        absent = {name: DATA_FILES[name].missing(root) for name in (claim.dataset, *claim.data)}
        absent = {name: paths for name, paths in absent.items() if paths}
        fetched = sorted(n for n in absent if DATA_FILES[n].torchvision and download)
        if set(absent) - set(fetched):
            lacking[claim.id] = [_absent_line(name, paths, root) for name, paths in absent.items()]
            continue
        if fetched:
            downloads[claim.id] = [f"{n}: absent; torchvision downloads it into {root} (data.download=true)"
                                   for n in fetched]
        runnable.append(claim)
    return runnable, lacking, downloads


def _estimates(
    claims: list[Claim], units: dict[str, list[UnitSpec]], base: DictConfig
) -> tuple[dict[str, Estimate], Estimate]:
    """The claims whose units still to run would take over an hour on 2 CPU cores, and the estimate for all units."""
    from capsbench.run.execute import training_group  # lazy: imports torch, once the input is known to be good

    store = UnitStore(base.output_dir)
    todo = {u.key: u for us in units.values() for u in us if base.remeasure or store.load(u) is None}
    found = {c.id: estimate([u for u in units[c.id] if u.key in todo], training_group) for c in claims}
    return {cid: e for cid, e in found.items() if e.over_an_hour}, estimate(list(todo.values()), training_group)


def _chosen(own: dict[str, Any], ids: list[str]) -> set[str] | None:
    """The ids named by claims=[...] (None: all); an unknown id is an error naming the close ones."""
    wanted = own.get("claims")
    if wanted is None:
        return None
    if isinstance(wanted, str):
        wanted = [wanted]
    if not isinstance(wanted, list) or not wanted:
        raise CapsbenchError(f"claims= takes a list of claim ids, e.g. claims=[{ids[0]}], got {wanted!r}")
    for name in wanted:
        if name not in ids:
            raise CapsbenchError(f"unknown claim {name!r}: {close_matches(str(name), ids)}")
    return {str(w) for w in wanted}


def _absent_line(name: str, paths: list[Path], root: Path) -> str:
    files = ", ".join(str(p) for p in paths[:4]) + (f" and {len(paths) - 4} more" if len(paths) > 4 else "")
    return f"{name}: absent {files}; get them {DATA_FILES[name].how_to_get(root)}"


def _text(value: Any) -> str:
    """A value as command-line text that composes back to the same value."""
    return value if isinstance(value, str) else json.dumps(list(value) if isinstance(value, tuple) else value)


def _side_needs(side: Side, base: DictConfig) -> tuple[tuple[tuple[str, str], ...], str | None]:
    """The side's constructor arguments that differ from what the budget builds (so a side asking for a default, such
    as routing_iterations=3, keeps the ordinary unit's key), and its training."""
    built = {**MODELS.get(side.model).arguments(), **(base.model_args.get(side.model) or {})}
    args = tuple(sorted((k, _text(v)) for k, v in side.model_args.items()
                        if k not in built or logged_text(built[k]) != logged_text(v)))
    return args, side.training


def _sections(claims: list[Claim], base: DictConfig) -> tuple[list[Section], dict[tuple[str, str], int]]:
    """The fewest suite configs holding every side (per suite, dataset and run settings, a model in each at most once),
    and where each (claim id, side) landed."""
    sections: list[Section] = []
    placed: dict[tuple[str, str], int] = {}
    for claim in claims:
        run = tuple(sorted((k, _text(v)) for k, v in claim.run.items()))
        for name in ("better", "worse"):
            side: Side = getattr(claim, name)
            need = _side_needs(side, base)
            home = next((i for i, s in enumerate(sections) if (s.suite, s.dataset, s.run) ==
                         (claim.suite, claim.dataset, run) and s.models.get(side.model, need) == need), None)
            if home is None:
                sections.append(Section(claim.suite, claim.dataset, run))
                home = len(sections) - 1
            sections[home].models[side.model] = need
            placed[(claim.id, name)] = home
    return sections, placed


def _compose(section: Section, rest: list[str], params: dict[str, str]) -> tuple[DictConfig, set[str]]:
    """The section's config: the common settings, its own, and the params.* overrides its suite has."""
    fields = {f.name for f in dataclasses.fields(CATALOG.get(section.suite).params)}
    mine = {k: v for k, v in params.items() if k.split(".")[1] in fields}
    items = [*rest, *(f"{k}={v}" for k, v in mine.items()), f"suite={section.suite}", f"dataset={section.dataset}",
             f"models=[{','.join(section.models)}]", *(f"{k}={v}" for k, v in section.run)]
    for model, (args, training) in section.models.items():
        items += [f"model_args.{model}.{k}={v}" for k, v in args]
        for part in (training or "").split("+") if training else ():
            items.append(f"model_train.{model}.{TRAINING_KEYS[part]}={part}")
    return compose(items), set(mine)
