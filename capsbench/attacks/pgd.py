"""`pgd`: Madry et al., "Towards Deep Learning Models Resistant to Adversarial Attacks" (arXiv:1706.06083), with the
margin loss of Carlini & Wagner, "Towards Evaluating the Robustness of Neural Networks" (arXiv:1608.04644)."""

from __future__ import annotations

from capsbench.attacks.base import Pass, RowAttack
from capsbench.attacks.objectives import Objective
from capsbench.attacks.step_rules import gradient_step


class PGD(RowAttack):
    """L-inf PGD with a uniform random start, `steps` sign steps of step_ratio * eps / steps (Madry et al.'s 2.5 eps / k
    rule), once with cross-entropy and once with the margin loss on the images cross-entropy left unbroken, each
    repeated `restarts` times on the survivors: an image is robust only if every pass fails at every iterate."""

    name = "pgd"
    attacks = "the model's attack logits (log-normalised capsule lengths; CNN logits)"
    LABEL = "PGD"
    ORDER = 60
    NORMS = ("linf", "l2")
    ARGUMENT_RANGES = {"steps": "int [1, inf)", "step_ratio": "(0, inf)", "restarts": "int [1, inf)"}
    objectives = (Objective(),)
    losses = ("ce", "margin")

    def __init__(self, *, steps: int = 50, step_ratio: float = 2.5, restarts: int = 1) -> None:
        self.steps, self.step_ratio, self.restarts = steps, step_ratio, restarts

    def budget(self, num_classes: int) -> str:
        return (f"{self.steps} steps of {self.step_ratio:g} eps/{self.steps}, random start, "
                f"{' then '.join(self.losses)} loss, {self.restarts} restart(s) each")

    def passes(self, eps: float, num_classes: int, norm: str = "linf") -> list[Pass]:
        """Per objective, per restart, per loss: each on the rows the earlier ones left."""
        rule = gradient_step(norm, self.step_ratio)
        return [Pass(o, loss, rule, self.steps, r) for o in self.objectives for r in range(self.restarts)
                for loss in self.losses]
