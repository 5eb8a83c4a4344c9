"""What a gradient attack differentiates: the model's attack logits, the adaptive (pre-squash, straight-through)
logits of a capsule model, or the vote surrogate. Each returns (B, C) logits and, where its forward pass is the
real model's, the model's decisions (B,) for free."""

from __future__ import annotations

import torch

from capsbench.models import Classifier
from capsbench.models.capsules import capsule_logits
from capsbench.models.straight_through import straight_through


class Objective:
    """The standard one: the model's own attack logits (log-normalised lengths for capsules, logits for CNNs)."""

    real_forward = True  # its forward pass is the model's, so its decisions are the model's

    def __init__(self, model: Classifier) -> None:
        self.model = model

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        out = self.model(x)
        return out.logits, out.scores.detach().argmax(dim=1)


class AdaptiveObjective(Objective):
    """Squash-aware logits: log-normalised pre-squash norms log(|s_j| / sum |s|) where the model exposes its class
    capsules before the squash (same argmax as the lengths, no saturation), else its logits; every squash and
    capsule-activation sigmoid back-propagates as the identity (BPDA). The forward pass is the exact model."""

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        with straight_through():
            out = self.model(x)
        logits = out.logits if out.pre_squash is None else capsule_logits(out.pre_squash.norm(dim=-1))
        return logits, out.scores.detach().argmax(dim=1)


class VoteObjective(Objective):
    """The vote surrogate's logits (uniform coupling instead of routing); its forward is not the model's, so
    decisions come from a separate no-grad pass of the real model."""

    real_forward = False

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self.model.vote_logits(x), None
