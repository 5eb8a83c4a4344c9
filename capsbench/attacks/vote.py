"""`vote`: Gu, Wu, Tresp, "Effective and Efficient Vote Attack on Capsule Networks" (ICLR 2021, arXiv:2102.10055)."""

from __future__ import annotations

import torch

from capsbench.attacks.objectives import VoteObjective
from capsbench.attacks.pgd import PGD
from capsbench.models import Classifier
from capsbench.models.base import NotApplicable


class VoteAttack(PGD):
    """PGD (pgd's budget) on the vote surrogate: class capsules from the votes averaged over all input capsules
    (uniform coupling instead of routing), squashed, as log-normalised lengths. An image counts as broken only when
    the real model misclassifies an iterate."""

    name = "vote"
    attacks = "the capsule votes: squash(mean over input capsules of the votes), uniform coupling, no routing"
    LABEL = "Vote"
    ORDER = 50
    NORMS = ("linf", "l2")
    ARGUMENT_RANGES = {"steps": "int [1, inf)", "step_ratio": "(0, inf)", "restarts": "int [1, inf)"}
    objectives = (VoteObjective(),)

    def __init__(self, *, steps: int = 50, step_ratio: float = 2.5, restarts: int = 1) -> None:
        super().__init__(steps=steps, step_ratio=step_ratio, restarts=restarts)

    def applies_to(self, model: Classifier, sample: torch.Tensor) -> str | None:
        try:
            with torch.no_grad():
                model.vote_logits(sample[:1])
        except NotApplicable as exc:
            return str(exc)
        return None
