"""Capsule-adaptive attacks: PGD through the squash with a straight-through backward on pre-squash norms, and the
Vote Attack on the capsule votes (adaptive evaluation: Athalye et al. 2018, arXiv:1802.00420; Tramèr et al. 2020,
"On Adaptive Attacks to Adversarial Example Defenses", arXiv:2002.08347)."""

from __future__ import annotations

import torch

from capsbench.attacks.base import AttackSettings
from capsbench.attacks.objectives import AdaptiveObjective, Objective, PreSquashObjective, VoteObjective
from capsbench.attacks.pgd import PGD
from capsbench.models import Classifier
from capsbench.models.base import NotApplicable


class AdaptivePGD(PGD):
    """`pgd_adaptive`: the same PGD budget as `pgd` (random start, cross-entropy then margin, restarts) on logits that
    do not saturate: log-normalised norms of the class capsules before their squash (CapsNet, Efficient-CapsNet; EM's
    logits are already pre-sigmoid), first with the exact backward, then, on the images that survive, with every
    squash, exp-squash and capsule-activation sigmoid back-propagating as the identity (BPDA). Neither pass is
    stronger on every model: on the quick MNIST CapsNet the exact backward leaves 44.5 % at eps 0.1 where BPDA leaves
    62.5 %, while Efficient-CapsNet's exp-squash needs BPDA. The forward pass, and so every decision, is the exact
    model."""

    name = "pgd_adaptive"
    attacks = (
        "log-normalised pre-squash class-capsule norms, exact backward, then straight-through (BPDA) backward "
        "through every squash on the survivors"
    )
    objectives = (PreSquashObjective, AdaptiveObjective)

    def make_objectives(self, model: Classifier, settings: AttackSettings) -> list[Objective]:
        return [objective(model) for objective in self.objectives]

    def applies_to(self, model: Classifier, sample: torch.Tensor) -> str | None:
        if not model.is_capsule:
            return "not a capsule model: it has no squash to pass straight through, so this would repeat pgd"
        return model.missing_adaptive_hooks(sample)


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
