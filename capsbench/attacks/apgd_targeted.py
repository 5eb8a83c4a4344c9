"""`apgd_targeted`: APGD-T of Croce and Hein (arXiv:2003.01690, sec. 4): targeted DLR on the raw class evidence
towards each of the likeliest other classes in turn."""

from __future__ import annotations

from capsbench.attacks.apgd import APGD
from capsbench.attacks.base import Pass
from capsbench.attacks.objectives import RawEvidenceObjective
from capsbench.attacks.step_rules import APGDStep


class APGDTargeted(APGD):
    """Targeted DLR towards each of the `targets` likeliest other classes (ranked by the clean evidence; None: every
    other class, as AutoAttack's), one random start each, every pass on the rows the earlier left robust; APGD's
    schedule, long_steps from long_eps. A targeted pass reaches images whose runner-up is not the weakest direction."""

    name = "apgd_targeted"
    LABEL = "APGD-T"
    ORDER = 30
    NORMS = ("linf", "l2")
    ARGUMENT_RANGES = {"steps": "int [1, inf)", "targets": "int [0, inf)", "long_steps": "int [1, inf)",
                       "long_eps": "[0, inf)"}
    loss = "targeted_dlr"

    def __init__(self, *, steps: int = 100, targets: int | None = None, long_steps: int | None = None,
                 long_eps: float = 0.15) -> None:
        super().__init__(steps=steps, long_steps=long_steps, long_eps=long_eps)
        self.targets = targets

    def count(self, num_classes: int) -> int:
        """The target classes tried."""
        return num_classes - 1 if self.targets is None else min(self.targets, num_classes - 1)

    def budget(self, num_classes: int) -> str:
        n = self.count(num_classes)
        towards = f"each of the {n} other classes" if n == num_classes - 1 else f"the {n} likeliest classes"
        return f"APGD-T (targeted DLR) towards {towards}, {self.steps} steps each{self.longer()}"

    def passes(self, eps: float, num_classes: int, norm: str = "linf") -> list[Pass]:
        return [Pass(RawEvidenceObjective(), self.loss, APGDStep(l2=norm == "l2"), self.steps_at(eps), 0, rank)
                for rank in range(1, self.count(num_classes) + 1)]
