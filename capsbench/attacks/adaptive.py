"""Capsule-adaptive attacks: PGD through the squash with a straight-through backward on pre-squash norms, and the
Vote Attack on the capsule votes (adaptive evaluation: Athalye et al. 2018, arXiv:1802.00420; Tramèr et al. 2020,
"On Adaptive Attacks to Adversarial Example Defenses", arXiv:2002.08347)."""

from __future__ import annotations

import torch

from capsbench.attacks.objectives import AdaptiveObjective, VoteObjective
from capsbench.attacks.pgd import PGD
from capsbench.models import Classifier
from capsbench.models.base import NotApplicable


class AdaptivePGD(PGD):
    """`pgd_adaptive`: the same PGD budget as `pgd` (random start, cross-entropy then margin, restarts) on logits that do
    not saturate: log-normalised norms of the class capsules before their squash (CapsNet, Efficient-CapsNet; EM's
    logits are already pre-sigmoid), with every squash, exp-squash and capsule-activation sigmoid back-propagating as
    the identity (BPDA). The forward pass, and so every decision, is the exact model."""

    name = "pgd_adaptive"
    attacks = "log-normalised pre-squash class-capsule norms, straight-through (BPDA) backward through every squash"
    objective = AdaptiveObjective

    def applies_to(self, model: Classifier, sample: torch.Tensor) -> str | None:
        if not model.is_capsule:
            return "not a capsule model: it has no squash to pass straight through, so this would repeat pgd"
        return None


class VoteAttack(PGD):
    """`vote`: Gu, Wu, Tresp, "Effective and Efficient Vote Attack on Capsule Networks" (ICLR 2021, arXiv:2102.10055).
    PGD (same budget as `pgd`) on the vote surrogate: class capsules from the votes averaged over all input capsules
    (uniform coupling instead of routing), squashed, as log-normalised lengths. An image counts as broken only when
    the real model misclassifies an iterate."""

    name = "vote"
    attacks = "the capsule votes: squash(mean over input capsules of the votes), uniform coupling, no routing"
    objective = VoteObjective

    def applies_to(self, model: Classifier, sample: torch.Tensor) -> str | None:
        try:
            with torch.no_grad():
                model.vote_logits(sample[:1])
        except NotApplicable as exc:
            return str(exc)
        return None
