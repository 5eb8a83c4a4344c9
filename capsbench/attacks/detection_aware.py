"""`pgd_detect_aware`: the adaptive PGD against a capsule model defended by reconstruction-based detection, with the
reconstruction distance in its loss (Qin et al., ICLR 2020, arXiv:1907.02957, sec. 5: the defence-aware attack;
adaptive evaluation per Tramèr et al. 2020, arXiv:2002.08347). Broken means misclassified and not flagged."""

from __future__ import annotations

import torch

from capsbench.attacks.adaptive import AdaptivePGD
from capsbench.attacks.base import AttackSettings
from capsbench.attacks.objectives import DetectionAwareObjective
from capsbench.models import Classifier


class DetectionAwarePGD(AdaptivePGD):
    """pgd_adaptive's passes and budget (same random starts), each objective with detection_weight x how far the
    reconstruction distance exceeds 0.9 x the threshold subtracted from its loss; an iterate the detector flags never
    counts as a success."""

    name = "pgd_detect_aware"
    attacks = ("pgd_adaptive's objectives minus the reconstruction distance over the detector's threshold; "
               "success = misclassified and not flagged")

    def applies_to(self, model: Classifier, sample: torch.Tensor) -> str | None:
        with torch.no_grad():
            if model(sample[:1]).reconstructions is None:
                return "the model has no reconstruction decoder, so there is no detector to evade"
        return None

    def make_objectives(self, model: Classifier, settings: AttackSettings) -> list[DetectionAwareObjective]:
        if settings.detection_threshold is None:
            raise ValueError("pgd_detect_aware needs the detector's threshold: AttackSettings.detection_threshold")
        return [DetectionAwareObjective(model, threshold=settings.detection_threshold, weight=settings.detection_weight,
                                        bpda=bpda) for bpda in (False, True)]  # as pgd_adaptive: exact, then BPDA


    def raw_objective(self, model: Classifier, settings: AttackSettings) -> DetectionAwareObjective:
        return DetectionAwareObjective(model, threshold=settings.detection_threshold, weight=settings.detection_weight,
                                       bpda=False, raw=True)
