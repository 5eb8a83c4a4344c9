"""Matrix capsules with EM routing (Hinton, Sabour, Frosst, ICLR 2018, openreview.net/forum?id=HJWLfGWRb):
the paper's smallNORB architecture with configurable sizes A, B, C, D, trained with the spread loss."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from capsbench.layers.em_routing import MIN_VARIANCE
from capsbench.layers.matrix_capsules import ClassMatrixCaps, ConvMatrixCaps, PrimaryMatrixCaps
from capsbench.models.base import Classifier, ModelOutput

STD_EPS = 1e-5


def spread_loss(activations: torch.Tensor, labels: torch.Tensor, margin: float) -> torch.Tensor:
    """sum_{i != t} max(0, m - (a_t - a_i))^2, averaged over the batch (Hinton et al. 2018, eq. 3).

    Args:
        activations: (B, C) class activations; labels: (B,) indices or (B, C) multi-hot (every target
            is then compared with every non-target).
    """
    targets = labels if labels.dim() == 2 else F.one_hot(labels, activations.shape[1])
    targets = targets.to(activations.dtype)  # (B, C)
    gap = activations.unsqueeze(2) - activations.unsqueeze(1)  # (B, t, i): a_t - a_i
    pairs = targets.unsqueeze(2) * (1.0 - targets).unsqueeze(1)  # (B, t, i): t a target, i not
    return (pairs * F.relu(margin - gap) ** 2).sum(dim=(1, 2)).mean()


class CapsNetEM(Classifier):
    """ReLU conv 5x5/2 (A) -> primary capsules (B) -> conv caps 3x3/2 (C) -> conv caps 3x3/1 (D) -> class capsules.

    Scores are the class activations; logits are their pre-sigmoid values lambda (beta_a - sum_h cost_h),
    which keep gradients where activations saturate (for attacks: argmax is the same).
    Images are standardised per image inside the model (the paper's smallNORB preprocessing). The
    spread-loss margin grows linearly from 0.2 to 0.9 over `margin_steps` training steps, counted in
    a buffer so that it is saved with the checkpoint.

    Args:
        in_channels, image_size, num_classes: of the dataset.
        a_channels, b_types, c_types, d_types: the paper's A, B, C, D (its small model: 64, 8, 16, 16).
        routing_iterations: EM iterations in every capsule layer (3).
        inverse_temperature: lambda of every EM routing.
        min_variance: variance floor of every EM routing (the paper's epsilon; its value is not given).
        margin_steps: training steps over which the spread-loss margin goes from 0.2 to 0.9.
    Shapes: (B, in_channels, H, W) -> scores (B, num_classes) activations in (0, 1), poses (B, num_classes, 16).
    """

    is_capsule = True

    ARGUMENT_RANGES = {  # checked before any work (capsbench.models.ranges)
        "a_channels": "int [1, inf)",
        "b_types": "int [1, inf)",
        "c_types": "int [1, inf)",
        "d_types": "int [1, inf)",
        "routing_iterations": "int [1, inf)",
        "inverse_temperature": "(0, inf)",
        "min_variance": "(0, inf)",
        "margin_steps": "int [0, inf)",
    }

    def __init__(
        self,
        *,
        in_channels: int = 1,
        image_size: int = 28,
        num_classes: int = 10,
        a_channels: int = 64,
        b_types: int = 8,
        c_types: int = 16,
        d_types: int = 16,
        routing_iterations: int = 3,
        inverse_temperature: float = 0.01,
        min_variance: float = MIN_VARIANCE,
        margin_steps: int = 10_000,
    ):
        super().__init__()
        if (image_size - 5) // 2 + 1 < 7:
            raise ValueError(f"image_size {image_size} is too small for capsnet_em (needs >= 17)")
        em = {
            "iterations": routing_iterations,
            "inverse_temperature": inverse_temperature,
            "min_variance": min_variance,
        }
        self.conv = nn.Conv2d(in_channels, a_channels, 5, 2)
        self.primary = PrimaryMatrixCaps(in_channels=a_channels, types=b_types)
        self.caps1 = ConvMatrixCaps(in_types=b_types, out_types=c_types, kernel_size=3, stride=2, **em)
        self.caps2 = ConvMatrixCaps(in_types=c_types, out_types=d_types, kernel_size=3, stride=1, **em)
        self.classes = ClassMatrixCaps(in_types=d_types, num_classes=num_classes, **em)
        self.margin_steps = margin_steps
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> ModelOutput:
        poses, logits = self._capsules(x)  # (B, classes, 16), (B, classes)
        return ModelOutput(scores=torch.sigmoid(logits), logits=logits, poses=poses)

    def vote_logits(self, x: torch.Tensor) -> torch.Tensor:
        """Vote surrogate (Gu et al., arXiv:2102.10055) for EM routing: every capsule layer routes with uniform
        assignments, i.e. a single M-step (activation-weighted mean of the votes), no E-step. -> (B, classes)."""
        return self._capsules(x, iterations=1)[1]

    def _capsules(self, x: torch.Tensor, iterations: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        mean, std = x.mean(dim=(1, 2, 3), keepdim=True), x.std(dim=(1, 2, 3), keepdim=True)
        h = F.relu(self.conv((x - mean) / (std + STD_EPS)))  # (B, A, H', W')
        pose, a = self.primary(h)
        pose, a = self.caps1(pose, a, iterations)
        pose, a = self.caps2(pose, a, iterations)
        return self.classes(pose, a, iterations)

    def margin(self) -> float:
        """The current spread-loss margin: 0.2 at the first step, 0.9 from `margin_steps` on."""
        return 0.2 + 0.7 * min(1.0, self.steps.item() / max(1, self.margin_steps))

    def loss(self, out: ModelOutput, labels: torch.Tensor, images: torch.Tensor, **_components) -> torch.Tensor:
        loss = spread_loss(out.scores, labels, self.margin())
        if self.training:
            self.steps += 1
        return loss
