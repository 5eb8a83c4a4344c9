"""`autoattack`: AutoAttack 'standard' (Croce & Hein, arXiv:2003.01690) as published, from torchattacks' parts."""

from __future__ import annotations

import torchattacks

from capsbench.attacks.torchattacks_adapters import LibraryAttack

STEPS = 100  # the standard AutoAttack's APGD-CE, APGD-T and FAB-T iterations
SQUARE_QUERIES = 5000


class AutoAttack(LibraryAttack):
    """APGD-CE, APGD-T, FAB-T at 100 iterations and Square at 5000 queries, one restart each, the engine's seed.
    torchattacks.AutoAttack runs its sub-attacks at their 10-iteration defaults with a time-based seed, so it is
    assembled here instead."""

    name = "autoattack"
    attacks = "the model's attack logits (APGD-CE, APGD-T, FAB-T, Square)"
    LABEL = "AutoAttack"
    ORDER = 90
    NORMS = ("linf", "l2")

    def __init__(self) -> None:
        pass

    def budget(self, num_classes: int) -> str:
        return f"APGD-CE, APGD-T, FAB-T at {STEPS} iterations, Square at {SQUARE_QUERIES} queries"

    def cost(self, eps: float, num_classes: int, norm: str = "linf") -> float:
        # APGD-CE, APGD-T over every other class and FAB-T over every other class, forward and backward per step
        return float(2 * STEPS * (1 + 2 * (num_classes - 1)) + SQUARE_QUERIES)

    def build(self, target, eps, settings):
        common = {"norm": "L2" if settings.norm == "l2" else "Linf", "eps": eps, "seed": settings.seed, "n_restarts": 1}
        n = settings.num_classes
        return torchattacks.MultiAttack([
            torchattacks.APGD(target, loss="ce", steps=STEPS, **common),
            torchattacks.APGDT(target, steps=STEPS, n_classes=n, **common),
            torchattacks.FAB(target, steps=STEPS, multi_targeted=True, n_classes=n, **common),
            torchattacks.Square(target, n_queries=SQUARE_QUERIES, **common),
        ])
