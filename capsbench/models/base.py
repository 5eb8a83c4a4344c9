"""The model-output contract and the base class every registered model derives from."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class ModelOutput:
    """What every model returns.

    scores: (B, C) class scores (capsule lengths in [0, 1) or softmax probabilities); argmax = prediction.
    logits: (B, C) unnormalised log-scores for cross-entropy attacks; argmax equals scores' argmax.
    poses: (B, C, D) class capsule poses, capsule models only.
    reconstructions: (B, C_in, H, W) decoder output, capsule models with a decoder only.
    """

    scores: torch.Tensor
    logits: torch.Tensor
    poses: torch.Tensor | None = None
    reconstructions: torch.Tensor | None = None


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


class LogitsAdapter(nn.Module):
    """Wraps a Classifier so that it returns one (B, C) logits tensor, as attack libraries expect."""

    def __init__(self, model: Classifier) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x).logits
