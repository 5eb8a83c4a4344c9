"""Attack registry: attacks on [0, 1] pixels in the norms each declares (L-inf, L2), judged by the classifier's own
decision, one attack a module.

CATALOG holds each attack's class as "package.module:Class"; what the class declares (its label, its place in the
tables, whether it reads gradients, its norms, its settings and their ranges) is read from its source without
importing torch, so that `params.attack_args.<attack>.<argument>` is checked before anything heavy loads. build(name,
args) imports the attack (and torch) and constructs it with the settings given.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from capsbench.errors import CapsbenchError
from capsbench.models.ranges import check_value
from capsbench.util.lazy import class_literal, keyword_arguments, lazy_attributes, load, split_target
from capsbench.util.registry import Registry, close_matches

if TYPE_CHECKING:
    from capsbench.attacks.base import Attack

WORST_CASE = "worst_case"  # the per-image worst case over every attack run: the headline, not an attack of its own


@dataclass(frozen=True)
class AttackEntry:
    """A registered attack: its class as "package.module:Class"; the rest is read from the class's source."""

    target: str

    def __post_init__(self) -> None:
        split_target(self.target)

    @functools.cached_property
    def white_box(self) -> bool:
        """Whether it reads the model's gradients (a black-box attack runs at the black-box eps only)."""
        return bool(class_literal(self.target, "WHITE_BOX", True))

    @functools.cached_property
    def defended(self) -> bool:
        """Whether it attacks the model together with its reconstruction detector (run by params.detection_fpr)."""
        return bool(class_literal(self.target, "DEFENDED", False))

    @functools.cached_property
    def minimal(self) -> bool:
        """Whether it is a minimum-norm attack (params.minimal), not one at a fixed eps."""
        return bool(class_literal(self.target, "MINIMAL", False))

    @functools.cached_property
    def norms(self) -> tuple[str, ...]:
        """The threat models it has a form for (a robustness suite's NORM must be one)."""
        return tuple(class_literal(self.target, "NORMS", ("linf",)))

    @functools.cached_property
    def label(self) -> str:
        return str(class_literal(self.target, "LABEL"))

    @functools.cached_property
    def order(self) -> int:
        return int(class_literal(self.target, "ORDER"))

    @functools.cached_property
    def arguments(self) -> dict[str, Any]:
        """Its settings: the keyword arguments of its constructor, with their defaults."""
        return keyword_arguments(self.target)

    @functools.cached_property
    def ranges(self) -> dict[str, Any]:
        return dict(class_literal(self.target, "ARGUMENT_RANGES", {}))


CATALOG: Registry[AttackEntry] = Registry("attack")
for _name, _target in {
    "fgsm": "capsbench.attacks.fgsm:FGSM",
    "pgd": "capsbench.attacks.pgd:PGD",
    "apgd": "capsbench.attacks.apgd:APGD",
    "apgd_targeted": "capsbench.attacks.apgd_targeted:APGDTargeted",
    "pgd_adaptive": "capsbench.attacks.pgd_adaptive:AdaptivePGD",
    "vote": "capsbench.attacks.vote:VoteAttack",
    "square": "capsbench.attacks.square:Square",
    "autoattack": "capsbench.attacks.autoattack:AutoAttack",
    "pgd_detect_aware": "capsbench.attacks.pgd_detect_aware:DetectionAwarePGD",
    "fmn": "capsbench.attacks.fmn:FMN",
    "fab": "capsbench.attacks.fab:FAB",
}.items():
    CATALOG.register(_name)(AttackEntry(_target))


def check_attack_args(attack_args: Mapping[str, Any], where: str = "params.attack_args") -> None:
    """Every attack named has the settings given, each one value in its declared range (null only for a setting
    whose default is null, its off value); the error names `<where>.<attack>.<setting>`."""
    for name, args in attack_args.items():
        if name not in CATALOG:
            raise CapsbenchError(f"unknown attack {name!r} in {where}: {close_matches(str(name), CATALOG.names())}")
        entry = CATALOG.get(name)
        if args is None:
            continue
        if not isinstance(args, Mapping):
            raise CapsbenchError(f"{where}.{name} takes the attack's settings, e.g. {where}.{name}.<setting>=..., "
                                 f"got {args!r}")
        for key, value in args.items():
            if key not in entry.arguments:
                accepted = ", ".join(entry.arguments) or "none"
                raise CapsbenchError(f"{name} has no setting {key!r} ({where}.{name}.{key}): its settings are "
                                     f"{accepted}")
            default, setting = entry.arguments[key], f"{where}.{name}.{key}"
            if value is None and default is not None:
                raise CapsbenchError(f"{setting} has no off value (null): give it one, e.g. its default {default!r}")
            if isinstance(value, Sequence) and not isinstance(value, str) and not isinstance(default, (list, tuple)):
                raise CapsbenchError(f"{setting} takes one value, not a list ({list(value)}): e.g. "
                                     f"{setting}={value[0] if len(value) else default!r}")
            if value is not None and key in entry.ranges:
                check_value(setting, value, entry.ranges[key])


def build(name: str, args: Mapping[str, Any] | None = None) -> Attack:
    """The attack `name` with these settings (its defaults for the rest); imports it (and torch)."""
    return _build(name, tuple(sorted((k, _frozen(v)) for k, v in (args or {}).items())))


@functools.cache
def _build(name: str, args: tuple[tuple[str, Any], ...]) -> Attack:
    return load(CATALOG.get(name).target)(**dict(args))


def _frozen(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def table_order() -> list[str]:
    """Every attack, the worst case first, in its declared place in the tables."""
    return [WORST_CASE, *sorted(CATALOG.names(), key=lambda n: (CATALOG.get(n).order, n))]


def labels() -> dict[str, str]:
    """Every attack's label in tables, the worst case's too."""
    return {WORST_CASE: "worst case", **{n: CATALOG.get(n).label for n in CATALOG.names()}}


_LAZY = {
    "Attack": "capsbench.attacks.base:Attack",
    "AttackResult": "capsbench.attacks.base:AttackResult",
    "EngineSettings": "capsbench.attacks.base:EngineSettings",
    "decisions": "capsbench.attacks.base:decisions",
    "run_attack": "capsbench.attacks.engine:run_attack",
    "margin": "capsbench.attacks.losses:margin",
    "worst_case_broken": "capsbench.attacks.worst_case:worst_case_broken",
}

__getattr__ = lazy_attributes(__name__, _LAZY)  # the attack machinery, imported with torch on first use

__all__ = ["CATALOG", "WORST_CASE", "AttackEntry", "build", "check_attack_args", "labels", "table_order", *_LAZY]
