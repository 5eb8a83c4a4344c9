"""Attack registry: L-inf attacks on [0, 1] pixels judged by the classifier's own decision, one family a module.

CATALOG (names, where each attack lives, whether it needs gradients) is readable without torch, so configs are checked
before anything heavy loads; ATTACKS.get(name) imports the attack (and torch) on first use.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from capsbench.util.lazy import lazy_attributes, load, split_target
from capsbench.util.registry import LoadingView, Registry

if TYPE_CHECKING:
    from capsbench.attacks.base import Attack

WORST_CASE = "worst_case"  # the per-image worst case over every attack run: the headline, not an attack of its own


@dataclass(frozen=True)
class AttackEntry:
    """A registered attack: its class as "package.module:Class", whether it uses the model's gradients, and whether
    it attacks the model together with its reconstruction detector (then run by params.detection_fpr, not listed)."""

    target: str
    white_box: bool = True
    defended: bool = False

    def __post_init__(self) -> None:
        split_target(self.target)


CATALOG: Registry[AttackEntry] = Registry("attack")
for _name, _entry in {
    "fgsm": AttackEntry("capsbench.attacks.pgd:FGSM"),
    "pgd": AttackEntry("capsbench.attacks.pgd:PGD"),
    "apgd": AttackEntry("capsbench.attacks.apgd:APGD"),
    "apgd_targeted": AttackEntry("capsbench.attacks.apgd:APGDTargeted"),
    "pgd_adaptive": AttackEntry("capsbench.attacks.adaptive:AdaptivePGD"),
    "vote": AttackEntry("capsbench.attacks.adaptive:VoteAttack"),
    "square": AttackEntry("capsbench.attacks.torchattacks_adapters:Square", white_box=False),
    "autoattack": AttackEntry("capsbench.attacks.torchattacks_adapters:AutoAttack"),
    "pgd_detect_aware": AttackEntry("capsbench.attacks.detection_aware:DetectionAwarePGD", defended=True),
}.items():
    CATALOG.register(_name)(_entry)


@functools.cache
def _instance(entry: AttackEntry) -> Attack:
    return load(entry.target)()


ATTACKS: LoadingView[AttackEntry, Attack] = LoadingView(CATALOG, _instance)  # get(name): the Attack, one per name

_LAZY = {
    "Attack": "capsbench.attacks.base:Attack",
    "AttackResult": "capsbench.attacks.base:AttackResult",
    "AttackSettings": "capsbench.attacks.base:AttackSettings",
    "decisions": "capsbench.attacks.base:decisions",
    "margin": "capsbench.attacks.losses:margin",
    "worst_case_broken": "capsbench.attacks.worst_case:worst_case_broken",
}

__getattr__ = lazy_attributes(__name__, _LAZY)  # the attack machinery, imported with torch on first use


__all__ = ["ATTACKS", "CATALOG", "WORST_CASE", "AttackEntry", *_LAZY]
