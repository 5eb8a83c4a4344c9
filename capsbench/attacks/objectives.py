"""What a gradient attack differentiates: the model's attack logits, the adaptive (pre-squash, straight-through)
logits of a capsule model, its raw class evidence, the vote surrogate, or the adaptive logits against a reconstruction
detector. An objective names the forward pass it reads (rows whose objectives share one are forwarded together) and
maps that pass's output to (B, C) logits, the model's decisions (B,) where its forward is the real model's, and an
optional penalty (B,) that the attack lowers while it raises its loss. Objectives hold no model: the engine passes it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from capsbench.attacks.detector import reconstruction_distance
from capsbench.layers.capsules import capsule_logits
from capsbench.layers.straight_through import straight_through
from capsbench.models import Classifier

REJECTED = -1  # a defended model's decision on an input its detector flags: never counts as the attack's success


def _exact(model: Classifier, x: torch.Tensor) -> Any:
    return model(x)


def _straight_through(model: Classifier, x: torch.Tensor) -> Any:
    with straight_through():
        return model(x)


def _votes(model: Classifier, x: torch.Tensor) -> Any:
    return model.vote_logits(x)


FORWARDS: dict[str, Callable[[Classifier, torch.Tensor], Any]] = {
    "exact": _exact,  # the model as it is
    "straight_through": _straight_through,  # every squash and capsule sigmoid back-propagates as the identity (BPDA)
    "votes": _votes,  # the vote surrogate's (B, C) logits: no decision of the model's
}


@dataclass(frozen=True)
class Objective:
    """The standard one: the model's own attack logits (log-normalised lengths for capsules, logits for CNNs)."""

    forward: ClassVar[str] = "exact"
    needs_reconstructions: ClassVar[bool] = False  # the decoder stays attached for it

    def logits(self, out: Any, x: torch.Tensor) -> torch.Tensor:
        return out.logits

    def decided(self, out: Any, x: torch.Tensor) -> torch.Tensor | None:
        """(B,) the decision of the model this objective attacks; None: a separate forward of the real model."""
        return out.scores.detach().argmax(dim=1)

    def penalty(self, out: Any, x: torch.Tensor) -> torch.Tensor | None:
        return None


@dataclass(frozen=True)
class PreSquashObjective(Objective):
    """Squash-aware logits with the exact backward: log-normalised pre-squash norms log(|s_j| / sum |s|) where the
    model exposes its class capsules before the squash (same argmax as the lengths, no saturation), else its logits."""

    def logits(self, out: Any, x: torch.Tensor) -> torch.Tensor:
        return _adaptive_logits(out)


@dataclass(frozen=True)
class AdaptiveObjective(PreSquashObjective):
    """The same logits with every squash and capsule-activation sigmoid back-propagating as the identity (BPDA), for
    squashes that saturate (exp-squash, sigmoids). The forward pass is the exact model."""

    forward: ClassVar[str] = "straight_through"


@dataclass(frozen=True)
class RawEvidenceObjective(Objective):
    """The raw class evidence with the exact backward: pre-squash norms |s_j| of vector capsules, else the model's
    declared evidence (self-routing's class activations), else its logits (EM's pre-sigmoid logits, CNN logits).
    A margin on it, max_{j != y} e_j - e_y, moves the true class and the runner-up alike; on log-normalised norms
    the gradient is grad n_j / n_j - grad n_y / n_y, which a confident model's small runner-up norm dominates."""

    def logits(self, out: Any, x: torch.Tensor) -> torch.Tensor:
        return raw_evidence(out)


@dataclass(frozen=True)
class StraightThroughRawObjective(RawEvidenceObjective):
    """The raw class evidence with every squash and capsule-activation sigmoid back-propagating as the identity
    (BPDA); the forward pass is the exact model."""

    forward: ClassVar[str] = "straight_through"


@dataclass(frozen=True)
class VoteObjective(Objective):
    """The vote surrogate's logits (uniform coupling instead of routing); its forward is not the model's, so
    decisions come from a separate no-grad pass of the real model."""

    forward: ClassVar[str] = "votes"

    def logits(self, out: Any, x: torch.Tensor) -> torch.Tensor:
        return out

    def decided(self, out: Any, x: torch.Tensor) -> torch.Tensor | None:
        return None


@dataclass(frozen=True)
class DetectionAwareObjective(Objective):
    """Against a reconstruction detector (Qin et al., ICLR 2020, arXiv:1907.02957, sec. 5): the adaptive logits (or
    with raw, the raw class evidence), exact or (bpda) straight-through, and as penalty `weight` x how far the
    reconstruction distance exceeds PENALTY_FROM of the detector's threshold (in units of the threshold), so the
    attack seeks a misclassified input that also reconstructs well, and follows the adaptive attack's path wherever
    the detector is far. A flagged input's decision is REJECTED: an image counts as broken only when the model gets
    it wrong and the detector lets it through."""

    threshold: float
    weight: float
    bpda: bool = False
    raw: bool = False
    needs_reconstructions: ClassVar[bool] = True
    PENALTY_FROM: ClassVar[float] = 0.9  # share of the threshold where the penalty starts

    @property
    def forward(self) -> str:  # type: ignore[override]
        return "straight_through" if self.bpda else "exact"

    def logits(self, out: Any, x: torch.Tensor) -> torch.Tensor:
        return raw_evidence(out) if self.raw else _adaptive_logits(out)

    def decided(self, out: Any, x: torch.Tensor) -> torch.Tensor | None:
        predicted = out.scores.detach().argmax(dim=1)
        flagged = reconstruction_distance(out, x).detach() > self.threshold
        return torch.where(flagged, torch.full_like(predicted, REJECTED), predicted)

    def penalty(self, out: Any, x: torch.Tensor) -> torch.Tensor | None:
        excess = (reconstruction_distance(out, x) / self.threshold - self.PENALTY_FROM).clamp(min=0.0)  # (B,)
        return self.weight * excess


def raw_evidence(out: Any) -> torch.Tensor:
    """(B, C) per-class evidence before any saturating or log map, argmax = decision (see ModelOutput.evidence)."""
    if out.pre_squash is not None:
        return out.pre_squash.norm(dim=-1)
    return out.evidence if out.evidence is not None else out.logits


def _adaptive_logits(out: Any) -> torch.Tensor:
    """Log-normalised pre-squash class-capsule norms where the model exposes them, else its attack logits."""
    return out.logits if out.pre_squash is None else capsule_logits(out.pre_squash.norm(dim=-1))
