"""`apgd`: APGD of Croce and Hein, "Reliable evaluation of adversarial robustness with an ensemble of diverse
parameter-free attacks" (arXiv:2003.01690, sec. 3), untargeted with the margin loss on the raw class evidence: the
model-agnostic attack every model gets."""

from __future__ import annotations

import torch

from capsbench.attacks.base import Pass, RowAttack
from capsbench.attacks.losses import MIN_CLASSES
from capsbench.attacks.objectives import RawEvidenceObjective
from capsbench.attacks.step_rules import APGDStep
from capsbench.models import Classifier


class APGD(RowAttack):
    """APGD (momentum, step size halving at its checkpoints, restarts from the best point) on the raw class evidence,
    untargeted, with the margin loss max_{j != y} e_j - e_y, from a uniform random start, `restarts` times on the
    rows still robust; `long_steps` steps instead of `steps` at eps >= long_eps, where the few images left robust are
    the ones a short schedule leaves too early. The same for every model: CNN logits; capsules' pre-squash norms
    |s_j|, EM's pre-sigmoid logits, self-routing's class activations. Untargeted DLR (the paper's APGD-DLR) was
    weaker on the quick CapsNet: its denominator's gradient cancels the true class's where the other classes'
    evidence is small and alike (results/attack_passes-quick-cpu2.md)."""

    name = "apgd"
    attacks = "the raw class evidence (CNN logits; pre-squash norms, EM's pre-sigmoid logits, class activations)"
    LABEL = "APGD"
    ORDER = 20
    NORMS = ("linf", "l2")
    ARGUMENT_RANGES = {"steps": "int [1, inf)", "restarts": "int [1, inf)", "long_steps": "int [1, inf)",
                       "long_eps": "[0, inf)"}
    loss = "margin"

    def __init__(self, *, steps: int = 100, restarts: int = 1, long_steps: int | None = None,
                 long_eps: float = 0.15) -> None:
        self.steps, self.restarts, self.long_steps, self.long_eps = steps, restarts, long_steps, long_eps

    def steps_at(self, eps: float) -> int:
        """The schedule at `eps`: long_steps from long_eps on (when set), else steps."""
        return self.long_steps if self.long_steps is not None and eps >= self.long_eps else self.steps

    def longer(self) -> str:
        return f"; {self.long_steps} steps at eps >= {self.long_eps:g}" if self.long_steps is not None else ""

    def budget(self, num_classes: int) -> str:
        return f"APGD, margin loss, {self.steps} steps, {self.restarts} restart(s){self.longer()}"

    def passes(self, eps: float, num_classes: int, norm: str = "linf") -> list[Pass]:
        return [Pass(RawEvidenceObjective(), self.loss, APGDStep(l2=norm == "l2"), self.steps_at(eps), r)
                for r in range(self.restarts)]

    def applies_to(self, model: Classifier, sample: torch.Tensor) -> str | None:
        with torch.no_grad():
            classes = model(sample[:1]).logits.shape[1]
        need = MIN_CLASSES.get(self.loss, 2)
        if classes < need:
            return f"{self.name}'s loss needs at least {need} classes, the model has {classes}"
        return None
