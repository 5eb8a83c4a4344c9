"""`pgd_detect_aware`: the adaptive PGD against a capsule model defended by reconstruction-based detection, with the
reconstruction distance in its loss (Qin et al., ICLR 2020, arXiv:1907.02957, sec. 5: the defence-aware attack;
adaptive evaluation per Tramèr et al. 2020, arXiv:2002.08347). Broken means misclassified and not flagged."""

from __future__ import annotations

import torch

from capsbench.attacks.objectives import DetectionAwareObjective, Objective
from capsbench.attacks.pgd_adaptive import AdaptivePGD
from capsbench.models import Classifier


class DetectionAwarePGD(AdaptivePGD):
    """pgd_adaptive's passes and budget (same random starts), each objective with `weight` x how far the
    reconstruction distance exceeds 0.9 x the detector's `threshold` subtracted from its loss; an iterate the detector
    flags never counts as a success. The threshold is the detector's, set on clean validation images by the suite."""

    name = "pgd_detect_aware"
    attacks = ("pgd_adaptive's objectives minus the reconstruction distance over the detector's threshold; "
               "success = misclassified and not flagged")
    LABEL = "PGD detection-aware"
    ORDER = 10
    NORMS = ("linf", "l2")
    DEFENDED = True
    ARGUMENT_RANGES = {"steps": "int [1, inf)", "step_ratio": "(0, inf)", "restarts": "int [1, inf)",
                       "targets": "int [0, inf)", "weight": "[0, inf)", "threshold": "(0, inf)"}

    def __init__(self, *, steps: int = 50, step_ratio: float = 2.5, restarts: int = 1, targets: int | None = None,
                 weight: float = 1.0, threshold: float | None = None) -> None:
        super().__init__(steps=steps, step_ratio=step_ratio, restarts=restarts, targets=targets)
        self.weight, self.threshold = weight, threshold

    @property
    def objectives(self) -> tuple[Objective, ...]:  # type: ignore[override]
        """As pgd_adaptive's: exact, then BPDA."""
        return tuple(self._against(bpda=bpda) for bpda in (False, True))

    @property
    def raw(self) -> Objective:  # type: ignore[override]
        return self._against(bpda=False, raw=True)

    def _against(self, *, bpda: bool, raw: bool = False) -> DetectionAwareObjective:
        if self.threshold is None:
            raise ValueError("pgd_detect_aware needs the detector's threshold: build it with threshold=")
        return DetectionAwareObjective(self.threshold, self.weight, bpda, raw)

    def applies_to(self, model: Classifier, sample: torch.Tensor) -> str | None:
        with torch.no_grad():
            if model(sample[:1]).reconstructions is None:
                return "the model has no reconstruction decoder, so there is no detector to evade"
        return None
