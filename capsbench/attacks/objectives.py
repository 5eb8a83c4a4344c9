"""What a gradient attack differentiates: the model's attack logits, the adaptive (pre-squash, straight-through)
logits of a capsule model, its raw class evidence, the vote surrogate, or the adaptive logits against a
reconstruction detector. Each returns
a Judgement: (B, C) logits, the model's decisions (B,) where its forward pass is the real model's, and an optional
penalty (B,) that the attack lowers while it raises its loss."""

from __future__ import annotations

from typing import NamedTuple

import torch

from capsbench.attacks.base import REJECTED
from capsbench.attacks.detector import reconstruction_distance
from capsbench.layers.capsules import capsule_logits
from capsbench.layers.straight_through import straight_through
from capsbench.models import Classifier


class Judgement(NamedTuple):
    logits: torch.Tensor  # (B, C)
    decided: torch.Tensor | None  # (B,) the real model's (or defended model's) decisions; None: ask the model
    penalty: torch.Tensor | None = None  # (B,) subtracted from the attack's loss


class Objective:
    """The standard one: the model's own attack logits (log-normalised lengths for capsules, logits for CNNs)."""

    real_forward = True  # its forward pass is the model's, so its decisions are the model's

    def __init__(self, model: Classifier) -> None:
        self.model = model

    def __call__(self, x: torch.Tensor) -> Judgement:
        out = self.model(x)
        return Judgement(out.logits, out.scores.detach().argmax(dim=1))


class PreSquashObjective(Objective):
    """Squash-aware logits with the exact backward: log-normalised pre-squash norms log(|s_j| / sum |s|) where the
    model exposes its class capsules before the squash (same argmax as the lengths, no saturation), else its logits."""

    def __call__(self, x: torch.Tensor) -> Judgement:
        out = self.model(x)
        return Judgement(_adaptive_logits(out), out.scores.detach().argmax(dim=1))


class AdaptiveObjective(Objective):
    """The same logits with every squash and capsule-activation sigmoid back-propagating as the identity (BPDA), for
    squashes that saturate (exp-squash, sigmoids). The forward pass is the exact model."""

    def __call__(self, x: torch.Tensor) -> Judgement:
        with straight_through():
            out = self.model(x)
        return Judgement(_adaptive_logits(out), out.scores.detach().argmax(dim=1))


class RawEvidenceObjective(Objective):
    """The raw class evidence with the exact backward: pre-squash norms |s_j| of vector capsules, else the model's
    declared evidence (self-routing's class activations), else its logits (EM's pre-sigmoid logits, CNN logits).
    A margin on it, max_{j != y} e_j - e_y, moves the true class and the runner-up alike; on log-normalised norms
    the gradient is grad n_j / n_j - grad n_y / n_y, which a confident model's small runner-up norm dominates."""

    def __call__(self, x: torch.Tensor) -> Judgement:
        out = self.model(x)
        return Judgement(raw_evidence(out), out.scores.detach().argmax(dim=1))


class StraightThroughRawObjective(Objective):
    """The raw class evidence with every squash and capsule-activation sigmoid back-propagating as the identity
    (BPDA); the forward pass is the exact model."""

    def __call__(self, x: torch.Tensor) -> Judgement:
        with straight_through():
            out = self.model(x)
        return Judgement(raw_evidence(out), out.scores.detach().argmax(dim=1))


class VoteObjective(Objective):
    """The vote surrogate's logits (uniform coupling instead of routing); its forward is not the model's, so
    decisions come from a separate no-grad pass of the real model."""

    real_forward = False

    def __call__(self, x: torch.Tensor) -> Judgement:
        return Judgement(self.model.vote_logits(x), None)


class DetectionAwareObjective(Objective):
    """Against a reconstruction detector (Qin et al., ICLR 2020, arXiv:1907.02957, sec. 5): the adaptive logits (or
    with raw, the raw class evidence), and
    as penalty `weight` x how far the reconstruction distance exceeds PENALTY_FROM of the detector's threshold (in
    units of the threshold), so the attack seeks a misclassified input that also reconstructs well, and follows the
    adaptive attack's path wherever the detector is far. A flagged input's decision is REJECTED: an image counts as
    broken only when the model gets it wrong and the detector lets it through."""

    PENALTY_FROM = 0.9  # share of the threshold where the penalty starts: iterates are pulled back before a flag

    def __init__(self, model: Classifier, *, threshold: float, weight: float, bpda: bool, raw: bool = False) -> None:
        super().__init__(model)
        self.threshold, self.weight, self.bpda, self.raw = threshold, weight, bpda, raw

    def __call__(self, x: torch.Tensor) -> Judgement:
        with straight_through(self.bpda):
            out = self.model(x)
        distance = reconstruction_distance(out, x)  # (B,)
        predicted = out.scores.detach().argmax(dim=1)
        decided = torch.where(distance.detach() > self.threshold, torch.full_like(predicted, REJECTED), predicted)
        excess = (distance / self.threshold - self.PENALTY_FROM).clamp(min=0.0)  # (B,)
        logits = raw_evidence(out) if self.raw else _adaptive_logits(out)
        return Judgement(logits, decided, self.weight * excess)


def raw_evidence(out) -> torch.Tensor:
    """(B, C) per-class evidence before any saturating or log map, argmax = decision (see ModelOutput.evidence)."""
    if out.pre_squash is not None:
        return out.pre_squash.norm(dim=-1)
    return out.evidence if out.evidence is not None else out.logits


def _adaptive_logits(out) -> torch.Tensor:
    """Log-normalised pre-squash class-capsule norms where the model exposes them, else its attack logits."""
    return out.logits if out.pre_squash is None else capsule_logits(out.pre_squash.norm(dim=-1))
