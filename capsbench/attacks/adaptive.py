"""Capsule-adaptive attacks: PGD through the squash with a straight-through backward on pre-squash norms, and the
Vote Attack on the capsule votes (adaptive evaluation: Athalye et al. 2018, arXiv:1802.00420; Tramèr et al. 2020,
"On Adaptive Attacks to Adversarial Example Defenses", arXiv:2002.08347)."""

from __future__ import annotations

import torch

from capsbench.attacks.base import AttackSettings
from capsbench.attacks.objectives import (
    AdaptiveObjective,
    Objective,
    PreSquashObjective,
    RawEvidenceObjective,
    VoteObjective,
)
from capsbench.attacks.pgd import PGD, TARGETED, Pass
from capsbench.models import Classifier
from capsbench.models.base import NotApplicable


class AdaptivePGD(PGD):
    """`pgd_adaptive`: PGD (random start, `steps` sign steps of step_ratio * eps / steps) in passes, each on the
    images the earlier ones left robust:

    1. cross-entropy, then margin, on log-normalised norms of the class capsules before their squash (no
       saturation), with the exact backward; 2. the same with every squash, exp-squash and capsule-activation sigmoid
       back-propagating as the identity (BPDA); 3. a margin on the raw class evidence (pre-squash norms |s_j|; EM's
       pre-sigmoid logits; self-routing's class activations), exact backward; 4. multi-targeted: the raw evidence of
       each other class in turn against the true class's, likeliest first (`targets` of them; all by default).
    Passes 1-3 run `restarts` times each. The log-normalised margin's gradient is dominated by a confident model's
    small runner-up norm, so it mostly raises the runner-up; the raw margin moves both (pass 3), and the targeted
    passes reach images whose runner-up is not the weakest direction. Neither backward is stronger on every model:
    on the quick MNIST CapsNet the exact one leaves 44.5 % at eps 0.1 where BPDA leaves 62.5 %; on the quick
    Efficient-CapsNet the exact backward was stronger too, though its primary capsules saturate. The forward pass,
    and so every decision, is the exact model."""

    name = "pgd_adaptive"
    attacks = (
        "log-normalised pre-squash class-capsule norms (exact, then straight-through on the survivors), then a "
        "margin on the raw class evidence, then the raw evidence of each other class against the true one"
    )

    def budget(self, settings: AttackSettings) -> str:
        targets = "every other class" if settings.targets is None else f"the {settings.targets} likeliest classes"
        return (f"{settings.steps} steps of {settings.step_ratio:g} eps/{settings.steps} per pass, random start; ce "
                f"then margin on log-normalised pre-squash norms (exact, then BPDA), raw-evidence margin, each "
                f"{settings.restarts} restart(s)" + ("" if settings.targets == 0 else
                                                     f"; then targeted raw margin towards {targets}"))

    def make_objectives(self, model: Classifier, settings: AttackSettings) -> list[Objective]:
        """Passes 1 and 2: the log-normalised pre-squash logits, exact then straight-through."""
        return [PreSquashObjective(model), AdaptiveObjective(model)]

    def raw_objective(self, model: Classifier, settings: AttackSettings) -> Objective:
        """Passes 3 and 4: the raw class evidence, exact backward."""
        return RawEvidenceObjective(model)

    def passes(self, model: Classifier, settings: AttackSettings) -> list[Pass]:
        raw = self.raw_objective(model, settings)
        passes = super().passes(model, settings) + [Pass(raw, "margin", r) for r in range(self.restarts(settings))]
        others = settings.num_classes - 1
        targets = others if settings.targets is None else min(settings.targets, others)
        return passes + [Pass(raw, TARGETED, 0, rank) for rank in range(1, targets + 1)]

    def pass_count(self, settings: AttackSettings) -> int:
        others = settings.num_classes - 1
        return 5 * self.restarts(settings) + (others if settings.targets is None else min(settings.targets, others))

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
