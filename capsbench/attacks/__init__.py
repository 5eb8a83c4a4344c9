"""Attack registry: L-inf attacks on [0, 1] pixels judged by the classifier's own decision, one family a module."""

from capsbench.attacks.adaptive import AdaptivePGD, VoteAttack
from capsbench.attacks.base import Attack, AttackResult, AttackSettings, decisions
from capsbench.attacks.pgd import FGSM, PGD, margin
from capsbench.attacks.torchattacks_adapters import AutoAttack, Square
from capsbench.attacks.worst_case import worst_case_broken
from capsbench.registry import Registry

ATTACKS: Registry[Attack] = Registry("attack")
for _attack in (FGSM(), PGD(), AdaptivePGD(), VoteAttack(), Square(), AutoAttack()):
    ATTACKS.register(_attack.name)(_attack)

WORST_CASE = "worst_case"  # the per-image worst case over every attack run: the headline, not an attack of its own

__all__ = ["ATTACKS", "WORST_CASE", "Attack", "AttackResult", "AttackSettings", "decisions", "margin", "worst_case_broken"]
