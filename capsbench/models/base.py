"""The model-output contract and the base class every registered model derives from."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


@dataclass
class ModelOutput:
    """What every model returns.

    scores: (B, C) class scores (capsule lengths in [0, 1) or softmax probabilities); argmax = prediction.
    logits: (B, C) unnormalised log-scores for cross-entropy attacks; argmax equals scores' argmax.
    poses: (B, C, D) class capsule poses, capsule models only.
    reconstructions: (B, C_in, H, W) decoder output, capsule models with a decoder only.
    pre_squash: (B, C, D) class capsules before their squash (|v| = squash(|s|), monotone), vector-capsule models
        only; adaptive attacks put their loss on these norms, which do not saturate.
    evidence: (B, C) raw class evidence where neither pre_squash nor logits is it: the per-class quantity before any
        saturating or log map, whose argmax is the decision (self-routing's class activations). Raw-margin attacks
        push it; without it they use the pre-squash norms, else the logits.
    """

    scores: torch.Tensor
    logits: torch.Tensor
    poses: torch.Tensor | None = None
    reconstructions: torch.Tensor | None = None
    pre_squash: torch.Tensor | None = None
    evidence: torch.Tensor | None = None


class Classifier(nn.Module):
    """Base class: inputs are images in [0, 1], shape (B, C_in, H, W); any normalisation is inside."""

    is_capsule: bool = False

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> ModelOutput:
        raise NotImplementedError

    def loss(
        self,
        out: ModelOutput,
        labels: torch.Tensor,
        images: torch.Tensor,
        *,
        components: torch.Tensor | None = None,
        component_labels: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The training loss of this model family (mean over the batch).

        labels: (B,) class indices or (B, C) multi-hot. For inputs made of K objects, components
        (B, K, C_in, H, W) and component_labels (B, K) let a decoder reconstruct each object from
        its own class; models without a decoder ignore them.
        """
        raise NotImplementedError

    def vote_logits(self, x: torch.Tensor) -> torch.Tensor:
        """(B, C) logits of the vote surrogate (Gu et al., ICLR 2021): class capsules from the votes with uniform
        coupling instead of routing. Models without votes raise NotApplicable with the reason."""
        raise NotApplicable(f"{type(self).__name__} has no capsule votes to average")

    def missing_adaptive_hooks(self, sample: torch.Tensor) -> str | None:
        """None when the capsule-adaptive PGD has something to attack on this capsule model (pre-squash class capsules,
        or squashes the straight-through switch reaches), else why not; built-in capsule models have them."""
        return None


class NotApplicable(Exception):
    """An attack or surrogate that does not exist for a model; the message says why (recorded, never a crash)."""


class SoftmaxClassifier(Classifier):
    """A classifier whose scores are softmax(logits), trained with cross-entropy (on multi-hot labels: sigmoid
    cross-entropy, see multi_hot_loss). Subclasses compute the logits: (B, C_in, H, W) -> (B, num_classes)."""

    def class_logits(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> ModelOutput:
        logits = self.class_logits(x)
        return ModelOutput(scores=torch.softmax(logits, dim=1), logits=logits)

    def loss(self, out: ModelOutput, labels: torch.Tensor, images: torch.Tensor, **_components) -> torch.Tensor:
        if labels.dim() == 2:
            return multi_hot_loss(out.logits, labels)
        return F.cross_entropy(out.logits, labels)


PRIOR_EPS = 1e-4  # keeps the prior's log-odds finite for all-zero or all-one targets


def multi_hot_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Sigmoid cross-entropy on multi-hot targets (Sabour et al.'s MultiMNIST baseline), with each class's sigmoid
    offset by the log-odds of the targets' density k / C, so that outputs start at the label prior.

    Without the offset a fresh network's sigmoids sit at 0.5 while only k of C targets are 1 (MultiMNIST: 2 of 10):
    the first gradients are dominated by "lower every output" for every input, which Adam turns into full steps
    that push whole ReLU layers below zero. This is the prior initialisation of Lin et al. ("Focal Loss for Dense
    Object Detection", arXiv:1708.02002, sec. 4.1), as a constant shift: rankings, scores and predictions are unchanged.
    logits, labels: (B, C).
    """
    target = labels.to(logits.dtype)
    prior = target.mean().clamp(PRIOR_EPS, 1.0 - PRIOR_EPS)  # k / C, the same for every class
    return F.binary_cross_entropy_with_logits(logits + torch.logit(prior), target)


class LogitsAdapter(nn.Module):
    """Wraps a Classifier so that it returns one (B, C) logits tensor, as attack libraries expect."""

    def __init__(self, model: Classifier) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x).logits
