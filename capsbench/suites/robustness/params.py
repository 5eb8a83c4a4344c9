"""The robustness suite's typed parameters and its config checks: importable without torch, so that `params.*` is
validated before any heavy library loads."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from capsbench.attacks import CATALOG, check_attack_args
from capsbench.errors import CapsbenchError
from capsbench.util.lazy import class_literal
from capsbench.util.precision import check_device_precision
from capsbench.util.registry import close_matches

PER_DATASET = {"keys": "dataset"}  # field metadata: a mapping keyed by dataset name (named in config errors)


def _each(setting: str, attacks: str) -> str:
    return f"attack_args.<attack>.{setting} of each attack it set ({attacks}); `capsbench list attacks` lists them"


PGD_FAMILY = "pgd, pgd_adaptive, vote, pgd_detect_aware"
APGD_FAMILY = "apgd, apgd_targeted"


@dataclass
class RobustnessParams:
    eps: dict[str, list[float]] = field(default_factory=dict, metadata=PER_DATASET)  # per dataset; must contain 0
    blackbox_eps: dict[str, float] = field(default_factory=dict, metadata=PER_DATASET)  # the one eps Square runs at
    attacks: list[str] = field(default_factory=lambda: ["fgsm", "apgd"])  # each on every image, reported alone
    # then in turn, each on the images every attack before it left robust (at this and every smaller eps)
    ensemble: list[str] = field(default_factory=lambda: ["apgd_targeted", "pgd_adaptive", "vote", "square"])
    extra_attacks: list[str] = field(default_factory=list)  # after the ensemble, the same way (e.g. autoattack)
    minimal: list[str] = field(default_factory=list)  # minimum-norm attacks (fmn, fab): each image's smallest
    # perturbation, bounded by the fixed-eps attacks
    attack_args: dict[str, Any] = field(default_factory=dict)  # attack -> its settings (capsbench.attacks: each
    # attack's constructor arguments and their ranges), e.g. attack_args.apgd.steps=25
    attack_precision: str = "fp32"  # bf16: gradient attacks under bf16 autocast, breaks confirmed in fp32 (opt-in)
    batch_size: int | None = None  # rows (image x eps x pass) in the pool at once; null: sized by the device
    compact_every: int | None = None  # iterates between the pool's reads of the device; null: 1 on CPU, 8 on GPU
    speculate: bool | None = None  # rows enter before what they wait for has finished; null: on a GPU only
    early_exit: bool = True  # stop attacking an image once broken (same records, less work)
    attack_seed: int = 0  # fixes random starts and the self-seeded attacks (Square, AutoAttack)
    near_zero: float = 1.0  # % accuracy at the largest eps below which the strongest attack counts as ~0
    examples: int = 8  # images in the adversarial-example grid per model
    detection_fpr: float | None = None  # set (e.g. 0.05): reconstruction-based detection for models with a decoder
    detection_val_images: int = 1000  # clean validation images the detector's threshold is set on
    MOVED: ClassVar[dict[str, str]] = {  # settings that became the attacks' own (params.attack_args.<attack>.*)
        "pgd_steps": _each("steps", PGD_FAMILY), "pgd_step_ratio": _each("step_ratio", PGD_FAMILY),
        "pgd_restarts": _each("restarts", PGD_FAMILY),
        "pgd_targets": _each("targets", "pgd_adaptive, pgd_detect_aware"),
        "apgd_steps": _each("steps", APGD_FAMILY), "long_apgd_steps": _each("long_steps", APGD_FAMILY),
        "long_eps": _each("long_eps", APGD_FAMILY), "apgd_restarts": "attack_args.apgd.restarts",
        "apgd_targets": "attack_args.apgd_targeted.targets", "square_queries": "attack_args.square.queries",
        "detection_weight": "attack_args.pgd_detect_aware.weight",
    }

    @staticmethod
    def validate(cfg: Any) -> None:
        p = cfg.params
        grid, bb = (g := eps_grid(p, cfg.dataset)).eps, g.blackbox
        top = 1.0 if suite_norm(cfg.suite) == "linf" else math.sqrt(_features(cfg.dataset))  # [0, 1] pixels
        if 0.0 not in grid or grid != sorted(set(grid)) or not all(0.0 <= e <= top for e in grid):
            raise CapsbenchError(
                f"params.eps.{cfg.dataset} must be increasing values in [0, {top:g}] that include 0, got {grid}"
            )
        lists = ("attacks", "ensemble", "extra_attacks")
        for key in lists:
            for a in p[key]:
                if a not in CATALOG:
                    raise CapsbenchError(f"unknown attack {a!r} in params.{key}: {close_matches(a, CATALOG.names())}")
        for i, a in enumerate(p.minimal):
            if a not in CATALOG or not CATALOG.get(a).minimal:
                known = [n for n in CATALOG.names() if CATALOG.get(n).minimal]
                raise CapsbenchError(f"params.minimal names minimum-norm attacks ({', '.join(known)}), got {a!r}")
            if a in p.minimal[:i]:
                raise CapsbenchError(f"attack {a!r} is named twice in params.minimal; name each attack once")
        named = [a for key in lists for a in p[key]]
        norm = suite_norm(cfg.suite)
        formless = [a for a in [*named, *p.minimal] if norm not in CATALOG.get(a).norms]
        if formless:
            raise CapsbenchError(f"attack {formless[0]!r} has no {norm} form (it has: "
                                 f"{', '.join(CATALOG.get(formless[0]).norms)}): leave it out of suite={cfg.suite}")
        fixed = [a for a in named if CATALOG.get(a).minimal]
        if fixed:
            raise CapsbenchError(f"{fixed[0]} is a minimum-norm attack: list it in params.minimal, not with the "
                                 "attacks at fixed eps")
        if len(set(named)) < len(named):
            twice = next(a for a in named if named.count(a) > 1)
            raise CapsbenchError(f"attack {twice!r} is named twice in params.attacks, ensemble and extra_attacks; "
                                 "name each attack once")
        defended = [a for a in named if CATALOG.get(a).defended]
        if defended:
            raise CapsbenchError(
                f"{defended[0]} is not listed in params.attacks: it runs against the reconstruction "
                "detector, which params.detection_fpr=0.05 (for example) turns on"
            )
        if p.detection_fpr is not None and not 0.0 < p.detection_fpr < 1.0:
            raise CapsbenchError(
                f"params.detection_fpr is a false-positive rate in (0, 1), e.g. 0.05; got {p.detection_fpr}"
            )
        if p.detection_val_images < 1:
            raise CapsbenchError(f"params.detection_val_images must be >= 1, got {p.detection_val_images}")
        if p.examples < 0:
            raise CapsbenchError(f"params.examples must be >= 0 (images in each model's adversarial-example grid; 0 "
                                 f"draws none), got {p.examples}")
        if not p.attacks and not p.ensemble:
            raise CapsbenchError("params.attacks and params.ensemble are empty: name at least one attack, e.g. "
                                 "params.attacks=[apgd]")
        black_box = any(not CATALOG.get(a).white_box for a in named)
        if black_box and (bb is None or bb not in grid or bb == 0.0):
            raise CapsbenchError(
                f"params.blackbox_eps.{cfg.dataset} must be a nonzero value of the eps grid {grid}, got {bb}"
            )
        for key in ("batch_size", "compact_every"):
            if p[key] is not None and p[key] < 1:
                raise CapsbenchError(f"params.{key} must be >= 1, or null to size it by the device; got {p[key]}")
        check_attack_args(p.attack_args)
        check_device_precision(p.attack_precision, cfg.device, "params.attack_precision")


def suite_norm(suite: str) -> str:
    """The threat model of robustness suite `suite` (its class's NORM), read without importing it."""
    from capsbench.suites import CATALOG as SUITES  # lazy: the suites' catalog imports this module

    return str(class_literal(SUITES.get(suite).target, "NORM", "linf"))


def _features(dataset: str) -> int:
    from capsbench.data import DATASETS  # torch-free: the catalog

    spec = DATASETS.get(dataset)
    return spec.in_channels * (spec.train_crop or spec.image_size) ** 2


@dataclass(frozen=True)
class EpsGrid:
    """One dataset's eps values (increasing, with 0) and the one eps the black-box attacks run at (None: none given)."""

    eps: list[float]
    blackbox: float | None


def eps_grid(params: Any, dataset: str) -> EpsGrid:
    """The dataset's eps grid and black-box eps, read from params.eps.<dataset> and params.blackbox_eps.<dataset>."""
    if dataset not in params.eps:
        raise CapsbenchError(
            f"no eps grid for dataset {dataset!r}: add params.eps.{dataset}=[0,...] (have: {list(params.eps)})"
        )
    bb = params.blackbox_eps.get(dataset)
    return EpsGrid([float(e) for e in params.eps[dataset]], None if bb is None else float(bb))
