"""`fgsm`: Goodfellow et al., "Explaining and Harnessing Adversarial Examples" (arXiv:1412.6572): one signed-gradient
step of size eps on cross-entropy from the clean image."""

from __future__ import annotations

from capsbench.attacks.base import Pass, RowAttack
from capsbench.attacks.objectives import Objective
from capsbench.attacks.step_rules import gradient_step


class FGSM(RowAttack):
    """One step of eps on the cross-entropy of the model's attack logits, no random start (in L2 along the normalised
    gradient: the fast gradient method)."""

    name = "fgsm"
    attacks = "the model's attack logits (log-normalised capsule lengths; CNN logits)"
    LABEL = "FGSM"
    ORDER = 70
    NORMS = ("linf", "l2")

    def __init__(self) -> None:
        pass

    def budget(self, num_classes: int) -> str:
        return "one step of size eps on cross-entropy, no random start"

    def passes(self, eps: float, num_classes: int, norm: str = "linf") -> list[Pass]:
        return [Pass(Objective(), "ce", gradient_step(norm, 1.0), 1, random_start=False)]
