"""`capsbench run suite=claims`: exactly the units the chosen claims need, as units of the ordinary suites (the same
settings give the same unit keys and checkpoints, so nothing an ordinary run measured is measured again), the claims
whose data files are absent (with the files and where to get them), and the claims whose protocol assumes another
budget (with what their units would cost); every estimate priced for the run's device (capsbench.run.cost_model)."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from capsbench.attacks import CATALOG as ATTACK_CATALOG
from capsbench.attacks import WORST_CASE
from capsbench.config.compose import compose, settle_device, shipped_defaults
from capsbench.config.request import Request, nest
from capsbench.data import DATASETS
from capsbench.data.files import DATA_FILES
from capsbench.errors import CapsbenchError
from capsbench.models import MODELS, check_model_arguments
from capsbench.reporting.baselines import logged_text
from capsbench.reporting.claim_files import CLAIMS_SUITE, Claim, Side, claim_ids, load_claims
from capsbench.run.claims_sizing import Need, claim_need, eps_grid
from capsbench.run.cost_model import Estimate, device_key, plan_work, price, rates
from capsbench.run.plan import Plan, Section, fix_threads, plan
from capsbench.run.store import UnitStore
from capsbench.run.units import UnitSpec
from capsbench.suites import CATALOG, SUITES
from capsbench.util.registry import close_matches
from capsbench.util.uris import shown_uri

log = logging.getLogger(__name__)
OWN_KEYS = ("claims", "one_seed_verdicts", "baselines_dir")  # read here, not by the suites
CHOSEN_BY_CLAIMS = ("models", "dataset", "model_args", "model_train")  # each claim names its own
DEFAULT_SEEDS = [0, 1, 2]
SMOKE_SEEDS = [0]  # smoke judges nothing: one seed runs every claim's path, in minutes
TRAINING_KEYS = {"pgd": "adversarial", "affine": "augment"}  # a side's `training` -> model_train.<model>.<key>
SIDES = ("better", "worse")
DATA_ROOT = "<data.root>"  # stands for the data folder in the lines the claims files keep


@dataclass
class ClaimSection:
    """One suite config serving some claims: its suite, dataset, budget and run settings, the test images, eps values
    and attacks alone its claims need (a claim shares a section only with claims that need the same: what enters a
    claim's worst case never depends on the claims planned beside it), and each model once."""

    suite: str
    dataset: str
    budget: str
    run: str  # the claims' `run` settings, canonical JSON (compared between claims)
    images: int | None = None
    eps: tuple[float, ...] = ()
    attacks: tuple[str, ...] = ()  # the attacks whose own numbers its claims read
    models: dict[str, tuple[str, ...]] = field(default_factory=dict)  # model -> (args, training, train), as JSON


@dataclass(frozen=True)
class Absent:
    """A dataset a claim reads whose files are absent: which files (relative to data.root) and where to get them."""

    dataset: str
    files: str
    how: str

    def line(self) -> str:
        return f"{self.dataset}: absent under data.root: {self.files}; get them {self.how}"


@dataclass(frozen=True)
class Unplanned:
    """A claim whose protocol assumes another budget than the run's: that budget, what its units would cost there on
    the run's device (and, from a CPU, on a GPU), and the command that measures it."""

    budget: str
    costs: str
    command: str

    def words(self) -> str:
        return f"its protocol assumes budget={self.budget} ({self.costs}); run {self.command}"


@dataclass
class ClaimPlan:
    """What `capsbench run suite=claims` will do, known before anything runs: the driver's plan and the claims'."""

    plan: Plan
    claims: list[Claim]  # the chosen claims, in file order
    units: dict[str, list[UnitSpec]]  # claim id -> its units (claims whose data are present)
    lacking: dict[str, list[Absent]]  # claim id -> absent data: the files and where to get them
    downloads: dict[str, list[str]]  # claim id -> data torchvision will download first (data.download=true)
    needs: dict[str, Need]  # claim id -> what it asks of its section
    unplanned: dict[str, Unplanned]  # claim id -> the budget its protocol assumes, what it would cost there
    estimates: dict[str, Estimate]  # claim id -> its units still to run, on the run's device
    total: Estimate  # every unit still to run
    one_seed: bool


def plan_claims(request: Request, command: str = "", gpu: str | None = None) -> ClaimPlan:
    """The plan of `capsbench run suite=claims [claims=[id,...]] [seeds=...] [budget=...] ...`; bad input fails before
    torch is imported. `command`: the command line as typed, for the claims table. `gpu`: price device=cuda on this
    GPU (a plan made where there is none: --dry-run), and leave device=cuda unchecked."""
    own = {k: request.get(k) for k in OWN_KEYS if request.get(k) is not None}
    if "claims" in request.line and request.line["claims"] is None:  # one keystroke from every claim: hours of work
        raise CapsbenchError("claims= names no claim: give the ids, e.g. claims=[sabour2017-params], or leave claims= "
                             "out to run every claim")
    for key in (*request.line, *request.file):
        if key in CHOSEN_BY_CLAIMS:
            raise CapsbenchError(f"suite=claims takes the models and datasets each claim names; drop {key}= "
                                 "(choose claims with claims=[id,...])")
    request = request.without("suite", *OWN_KEYS)
    if request.get("seeds") is None:
        request = request.merged({"seeds": SMOKE_SEEDS if request.get("budget") == "smoke" else DEFAULT_SEEDS})
    params = {**(request.file.get("params") or {}), **(request.line.get("params") or {})}
    common = request.without("params")
    folder = Path(str(own["baselines_dir"])) if own.get("baselines_dir") else None
    wanted = _chosen(own, claim_ids(folder))  # before load_claims, which imports the suites (and torch)
    claims = [c for c in load_claims(folder) if wanted is None or c.id in wanted]
    _refuse_overridden(claims, params)
    base = compose(common, require_suite=False, resolve_device=False)  # the settings every section shares
    for claim in claims:  # after compose, which registers the command line's model aliases
        _check_runnable(claim)
    # device=auto resolves as the run will, so that a dry run's units are the run's (and a unit it finished, finished);
    # only device=cuda on a machine without one stays as it is, priced as `gpu`
    resolve = gpu is None or not str(base.device).startswith("cuda")
    if resolve:
        settle_device(base)
    fix_threads(base)
    smoke = base.budget == "smoke"  # in minutes: only data already here (a download is no smoke test)
    runnable, lacking, downloads = _by_data(claims, Path(base.data.root), bool(base.data.download) and not smoke)
    needs = {c.id: claim_need(c, DATASETS.get(c.dataset).test_size) for c in runnable}
    if smoke:  # smoke checks the pipeline and judges nothing: every claim at the smoke budget's
        # training, sizes, test images and attacks, so that every claim's path runs in minutes (power-sized test sets,
        # published sizes and targets belong to the budgets that judge)
        needs = {cid: dataclasses.replace(need, train={}, images=None, images_why="the smoke budget's own",
                                          budget=None) for cid, need in needs.items()}
    assumed = {c.id: needs[c.id].budget for c in runnable if _budget_unmet(c, needs[c.id], base.budget)}
    planned = [c for c in runnable if c.id not in assumed]
    # one pass places every claim: a claim not planned lands at the budget it assumes, in sections of its own (no
    # planned claim shares that budget and suite), after the planned claims' sections, which keep their keys
    found, placed = _sections([*planned, *(c for c in runnable if c.id in assumed)], needs, base)
    composed = _suite_sections(found, common, params, resolve=resolve)
    mine = sorted({placed[(c.id, name)] for c in planned for name in SIDES})
    sections = [composed[i] for i in mine]
    used = {k for i in mine for k in _own_params(found[i].suite, params)}
    unused = sorted(set(params) - used)
    if unused:
        raise CapsbenchError(f"params.{unused[0]} is a setting of no suite the chosen claims run; drop it")
    units = {c.id: _claim_units(c, composed, placed) for c in planned}
    estimates, everything = _estimates(planned, units, base, gpu)
    unplanned = {c.id: _unplanned(c, assumed[c.id], _claim_units(c, composed, placed), base, gpu)
                 for c in runnable if c.id in assumed}
    downloads = {cid: lines for cid, lines in downloads.items() if cid in units}  # only what planned claims read
    claim_plan = ClaimPlan(Plan(base, sections), claims, units, lacking, downloads, needs, unplanned, estimates,
                           everything, bool(own.get("one_seed_verdicts")))
    claim_plan.plan.notes = _notes(claim_plan)
    from capsbench.run.claims_finish import JudgeClaims  # lazy: the driver's modules (torch), once input is good

    claim_plan.plan.finish = JudgeClaims(
        claims=claims, units=units, lacking=lacking, unplanned=unplanned,
        sides={(c.id, name): {u.key for u in _claim_units(c, composed, placed, (name,))} for c in planned
               for name in SIDES},
        sections={s.key: {u.key for u in s.units} for s in sections}, one_seed=claim_plan.one_seed,
        budget=base.budget, seeds=list(base.seeds), store=shown_uri(base.tracking.uri, base.output_dir),
        command=command)
    return claim_plan


def _budget_unmet(claim: Claim, need: Need, budget: str) -> bool:
    """Whether the claim's protocol assumes another budget than the run's, for a suite that trains (a suite that trains
    nothing, such as efficiency, is measured at the budget the claim assumes: it costs minutes)."""
    return need.budget is not None and need.budget != budget and SUITES.get(claim.suite).needs_training


def _claim_units(claim: Claim, sections: list[Section], placed: dict[tuple[str, str], int],
                 sides: tuple[str, ...] = SIDES) -> list[UnitSpec]:
    """The units measuring the claim's `sides` (a unit two sides share, once)."""
    return list({u.key: u for name in sides for u in sections[placed[(claim.id, name)]].units
                 if u.model == getattr(claim, name).model}.values())


def _unplanned(claim: Claim, budget: str, units: list[UnitSpec], base: DictConfig, gpu: str | None) -> Unplanned:
    """Why a claim whose protocol assumes another budget is not planned, with what its units would cost at that
    budget, on this run's device and, from a CPU, on a GPU."""
    here = _estimate(units, base, gpu)
    costs = f"{here.words()} on {here.device}"
    on_gpu = str(base.device).startswith("cuda")
    if not on_gpu:
        there = _estimate(units, base, gpu, device="cuda")
        costs += f", {there.words()} on one {there.device}"
    return Unplanned(budget, costs, f"capsbench run suite=claims budget={budget}{'' if on_gpu else ' device=cuda'} "
                                    f"claims=[{claim.id}]")


def _suite_sections(found: list[ClaimSection], common: Request, params: dict[str, Any], *,
                    resolve: bool = True) -> list[Section]:
    """The driver's sections of the claim sections: composed, threads fixed, planned, keyed by suite and dataset."""
    sections, counter = [], defaultdict(int)
    for claim_section in found:
        cfg = _compose(claim_section, common, params, resolve)
        fix_threads(cfg)  # fixed per unit, as every `capsbench run` does
        counter[(cfg.suite, cfg.dataset)] += 1
        key = f"{cfg.suite}-{cfg.dataset}-{counter[(cfg.suite, cfg.dataset)]}"
        sections.append(Section(key, cfg, plan(cfg), f"{CLAIMS_SUITE}/{key}"))
    return sections


def _notes(p: ClaimPlan) -> list[tuple[int, str]]:
    """Said before anything runs: each planned claim's units, test images, training and estimated time, the total, and
    the claims not planned (absent data, a budget this run does not have)."""
    cfg = p.plan.cfg
    units = {u.key for s in p.plan.sections for u in s.units}
    notes = [(logging.INFO, f"suite=claims at budget={cfg.budget}, seeds {list(cfg.seeds)}: {len(p.units)} of "
                            f"{len(p.claims)} claims planned, {len(units)} units in {len(p.plan.sections)} sections")]
    for cid, claim_units in p.units.items():
        need = p.needs[cid]
        images = f"{need.images:,} test images ({need.images_why})" if need.images else "the budget's test images"
        train = (f"trained to {need.train['target_val_accuracy']:g} % validation accuracy (at most "
                 f"{need.train.get('max_epochs', 'the budget')} epochs)" if need.train else "the budget's training")
        at = {str(u.config["budget"]) for u in claim_units} - {cfg.budget}  # a paper-budget claim of a suite
        train += f", at budget={at.pop()}" if at else ""  # that trains nothing is measured at paper
        notes.append((logging.INFO, f"claim {cid}: {len(claim_units)} units, {images}, {train}; "
                                    f"{p.estimates[cid].words()} still to run"))
    notes.append((logging.INFO, f"estimated time of the units still to run: {p.total.words()} on {p.total.device}"
                                + (f" ({p.total.why})" if p.total.why else "")))
    notes += [(logging.WARNING, f"claim {cid} is not planned, its data files are absent (data.root={cfg.data.root}): "
                                f"{'; '.join(a.line() for a in absent)}") for cid, absent in p.lacking.items()]
    notes += [(logging.WARNING, f"claim {cid} is not planned: {why.words()}") for cid, why in p.unplanned.items()]
    notes += [(logging.WARNING, f"claim {cid}: {'; '.join(lines)}") for cid, lines in p.downloads.items()]
    return notes


def _by_data(
    claims: list[Claim], root: Path, download: bool
) -> tuple[list[Claim], dict[str, list[Absent]], dict[str, list[str]]]:
    """(the claims whose data are present or will be downloaded, the absent data of the others with where to get them,
    the data torchvision will download first)."""
    runnable, lacking, downloads = [], {}, {}
    for claim in claims:
        read = (claim.dataset,) if CATALOG.get(claim.suite).needs_data else ()  # a count reads no images
        absent = {name: DATA_FILES[name].missing(root) for name in (*read, *claim.data)}
        absent = {name: paths for name, paths in absent.items() if paths}
        fetched = sorted(n for n in absent if DATA_FILES[n].torchvision and download)
        if set(absent) - set(fetched):
            lacking[claim.id] = [_absent(name, paths, root) for name, paths in absent.items()]
            continue
        if fetched:
            downloads[claim.id] = [f"{n}: absent; torchvision downloads it into {root} (data.download=true)"
                                   for n in fetched]
        runnable.append(claim)
    return runnable, lacking, downloads


def _estimates(
    claims: list[Claim], units: dict[str, list[UnitSpec]], base: DictConfig, gpu: str | None
) -> tuple[dict[str, Estimate], Estimate]:
    """Each claim's units still to run (a unit shared by two claims counts in both), and every unit still to run."""
    store = UnitStore(base.output_dir)
    todo = {u.key: u for us in units.values() for u in us if base.remeasure or store.load(u) is None}
    found = {c.id: _estimate([u for u in units[c.id] if u.key in todo], base, gpu) for c in claims}
    return found, _estimate(list(todo.values()), base, gpu)


def _estimate(units: list[UnitSpec], base: DictConfig, gpu: str | None, device: str | None = None) -> Estimate:
    """The units' minutes on `device` (default: the run's), CUDA priced as `gpu` where this machine has none."""
    return price(units, plan_work(units), device_key(device or base.device, gpu), rates(base.cache_dir))



def _chosen(own: dict[str, Any], ids: list[str]) -> set[str] | None:
    """The ids named by claims=[...] (None: all); an unknown or repeated id is an error (naming the close ones)."""
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
    repeated = sorted({str(w) for w in wanted if wanted.count(w) > 1})
    if repeated:
        raise CapsbenchError(f"claims lists {', '.join(repeated)} more than once; give each once, e.g. "
                             f"claims=[{wanted[0]}]")
    return {str(w) for w in wanted}


def _absent(name: str, paths: list[Path], root: Path) -> Absent:
    """Which files of a dataset are absent, relative to data.root (they go into the claims files: no local absolute
    path), and where to get them."""
    shown = [p.relative_to(root).as_posix() if p.is_relative_to(root) else p.name for p in paths]
    files = ", ".join(shown[:4]) + (f" and {len(shown) - 4} more" if len(shown) > 4 else "")
    return Absent(name, files, DATA_FILES[name].how_to_get(Path(DATA_ROOT)))


def _canonical(value: Any) -> str:
    """A value as comparable text (mappings sorted): two claims asking for the same settings get the same text."""
    return json.dumps(value, sort_keys=True, default=list)


def _side_needs(side: Side, need: Need, base: DictConfig) -> tuple[str, ...]:
    """The side's constructor arguments that differ from what the budget builds (so a side asking for a default, such
    as routing_iterations=3, keeps the ordinary unit's key), its training protocol and its claim's training target, as
    comparable text."""
    built = {**MODELS.get(side.model).arguments(), **(base.model_args.get(side.model) or {})}
    args = {k: v for k, v in side.model_args.items() if k not in built or logged_text(built[k]) != logged_text(v)}
    return _canonical(args), side.training or "", _canonical(need.train)


def _sections(claims: list[Claim], needs: dict[str, Need], base: DictConfig
              ) -> tuple[list[ClaimSection], dict[tuple[str, str], int]]:
    """The fewest suite configs holding every side (per suite, dataset, budget and run settings, a model in each at
    most once), and where each (claim id, side) landed; a claim's budget is the one its protocol assumes, else the
    run's."""
    sections: list[ClaimSection] = []
    placed: dict[tuple[str, str], int] = {}
    for claim in claims:
        need = needs[claim.id]
        at = need.budget or base.budget
        identity = (claim.suite, claim.dataset, at, _canonical(claim.run), *_measured(claim, need, at))
        for name in SIDES:
            side: Side = getattr(claim, name)
            wants = _side_needs(side, need, base)
            home = next((i for i, s in enumerate(sections) if (s.suite, s.dataset, s.budget, s.run, s.images, s.eps,
                                                                s.attacks) == identity
                         and s.models.get(side.model, wants) == wants), None)
            if home is None:
                sections.append(ClaimSection(*identity))
                home = len(sections) - 1
            sections[home].models[side.model] = wants
            placed[(claim.id, name)] = home
    return sections, placed


def _measured(claim: Claim, need: Need, budget: str) -> tuple[int | None, tuple[float, ...], tuple[str, ...]]:
    """What a claim's section measures, fixed by the claim alone: its test images (the power calculation's, never
    fewer than the budget measures anyway: None), its eps and the attacks it reads that the budget does not report
    alone already."""
    shipped = shipped_defaults(claim.suite, budget)
    default = shipped.data.test_subset
    images = need.images if need.images and (default is None or need.images > default) else None
    alone = set(shipped.params.get("attacks", ())) if "params" in shipped and shipped.params else set()
    reads = {a for a in ({**claim.sweep, **s.sweep}.get("attack") for s in (claim.better, claim.worse)) if a}
    return images, tuple(sorted(need.eps)), tuple(sorted(reads - alone - {WORST_CASE}))


def _check_runnable(claim: Claim) -> None:
    """A chosen claim's suite, each side's model and its arguments exist in this install; the error names the claim's
    file and id."""
    try:
        SUITES.get(claim.suite)
        for name in SIDES:
            side = getattr(claim, name)
            check_model_arguments(side.model, side.model_args)
    except CapsbenchError as exc:
        raise CapsbenchError(f"{claim.origin}: {exc}") from None


def _refuse_overridden(claims: list[Claim], params: dict[str, Any]) -> None:
    """A params.* setting that a claim's protocol fixes (its `run`) is the claim's: the command line setting it
    otherwise is refused, never silently replaced."""
    for claim in claims:
        for key, value in claim.run.items():
            name = key.removeprefix("params.")
            if key.startswith("params.") and name in params and params[name] != value:
                raise CapsbenchError(f"params.{name}={_typed(params[name])} conflicts with claim {claim.id}, whose "
                                     f"protocol sets {key}={_typed(value)}: drop it, or leave {claim.id} out of "
                                     "claims=[...]")


def _typed(value: Any) -> str:
    """A setting as the command line writes it: [a,b] for a list."""
    return f"[{','.join(map(str, value))}]" if isinstance(value, (list, tuple)) else str(value)


def _own_params(suite: str, params: dict[str, Any]) -> dict[str, Any]:
    """The params.* settings of the command line that `suite` has."""
    fields = {f.name for f in dataclasses.fields(CATALOG.get(suite).params)}
    return {k: v for k, v in params.items() if k in fields}


def _compose(section: ClaimSection, common: Request, params: dict[str, Any], resolve: bool = True) -> DictConfig:
    """The section's config: the common settings, its own (budget, test images, eps values, each model's arguments and
    training), and the params.* settings its suite has."""
    run = json.loads(section.run)
    layer: dict[str, Any] = {"suite": section.suite, "dataset": section.dataset, "budget": section.budget,
                             "models": list(section.models), "params": _own_params(section.suite, params)}
    if section.images:  # the whole test set is test_subset=null, as an ordinary run writes it
        whole = section.images >= DATASETS.get(section.dataset).test_size
        layer["data"] = {"test_subset": None if whole else section.images}
    layer = Request(layer).merged(nest(run, {k: str(v) for k, v in run.items()})).line
    for model, (args, training, train) in section.models.items():
        layer.setdefault("model_args", {})[model] = json.loads(args)
        trains = {TRAINING_KEYS[part]: part for part in training.split("+") if training}
        target = json.loads(train)
        if target:
            trains["target_val_accuracy"] = target["target_val_accuracy"]
            trains |= {"epochs": target["max_epochs"]} if "max_epochs" in target else {}
        if trains:
            layer.setdefault("model_train", {})[model] = trains
    cfg = compose(common.merged(layer), resolve_device=resolve)
    if section.suite == "robustness" and (section.eps or section.attacks):
        _read_by_claims(cfg, section, set(layer["params"]))
        CATALOG.get(section.suite).params.validate(cfg)  # the suite's own checks, on what the claims set
    return cfg


def _read_by_claims(cfg: DictConfig, section: ClaimSection, given: set[str]) -> None:
    """A robustness section measures what its claims read: the eps grid holds their eps (capsbench.run.claims_sizing.
    eps_grid), and an attack a claim reads on its own is reported alone (on every image: its breaks still count in the
    worst case), so it leaves the ensemble; pgd_detect_aware runs with the detector, never in these lists. What the
    command line set (`given`) stays as it is."""
    p = cfg.params
    if section.eps and "eps" not in given:
        p.eps[section.dataset] = eps_grid(list(p.eps[section.dataset]), set(section.eps),
                                          p.blackbox_eps.get(section.dataset))
    read = [a for a in section.attacks if a in ATTACK_CATALOG and not ATTACK_CATALOG.get(a).defended
            and a not in p.attacks]
    if read and "attacks" not in given:
        p.attacks = [*p.attacks, *read]
        p.ensemble = [a for a in p.ensemble if a not in read]
