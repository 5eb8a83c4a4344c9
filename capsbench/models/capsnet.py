"""Sabour et al.'s CapsNet ("Dynamic Routing Between Capsules", arXiv:1710.09829)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from capsbench.layers.capsules import (
    CapsuleVotes,
    Decoder,
    PrimaryCaps,
    capsule_logits,
    decode,
    squash,
)
from capsbench.layers.routing import DynamicRouting
from capsbench.models.base import ModelOutput
from capsbench.models.vector_capsules import VectorCapsuleClassifier


class CapsNet(VectorCapsuleClassifier):
    """Conv -> PrimaryCaps -> class capsules by dynamic routing -> optional reconstruction decoder.

    Args (defaults are the paper's MNIST model, 8.2 M parameters):
        in_channels, image_size, num_classes: of the dataset.
        conv_channels: first conv (256 @ 9x9, stride 1, ReLU).
        primary_types, primary_dim: primary capsules (32 types of 8D, 9x9 conv, stride 2).
        class_dim: class capsule dimension (16).
        routing_iterations: r (3).
        decoder_hidden: decoder FC sizes ((512, 1024)); () disables reconstruction.
        recon_weight: weight of the sum-squared reconstruction error in the loss (0.0005).
    Shapes: (B, in_channels, H, W) -> scores (B, num_classes), poses (B, num_classes, class_dim).
    """

    ARGUMENT_RANGES = {  # checked before any work (capsbench.models.ranges)
        "conv_channels": "int [1, inf)",
        "primary_types": "int [1, inf)",
        "primary_dim": "int [1, inf)",
        "class_dim": "int [1, inf)",
        "routing_iterations": "int [1, inf)",
        "decoder_hidden": "int [1, inf)",
        "recon_weight": "[0, inf)",
    }

    def __init__(
        self,
        *,
        in_channels: int = 1,
        image_size: int = 28,
        num_classes: int = 10,
        conv_channels: int = 256,
        primary_types: int = 32,
        primary_dim: int = 8,
        class_dim: int = 16,
        routing_iterations: int = 3,
        decoder_hidden: tuple[int, ...] = (512, 1024),
        recon_weight: float = 0.0005,
    ):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, conv_channels, 9)
        self.primary = PrimaryCaps(in_channels=conv_channels, num_types=primary_types, dim=primary_dim)
        grid = (image_size - 8 - 9) // 2 + 1  # spatial size after conv 9x9/1 and primary 9x9/2
        if grid < 1:
            raise ValueError(f"image_size {image_size} is too small for CapsNet (needs >= 17)")
        self.votes = CapsuleVotes(
            in_caps=primary_types * grid * grid, in_dim=primary_dim, out_caps=num_classes, out_dim=class_dim
        )
        self.routing = DynamicRouting(iterations=routing_iterations)
        self.recon_weight = recon_weight
        self.decoder = (
            Decoder(
                num_classes=num_classes,
                caps_dim=class_dim,
                hidden=tuple(decoder_hidden),
                image_shape=(in_channels, image_size, image_size),
            )
            if decoder_hidden
            else None
        )

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> ModelOutput:
        u = self.primary(F.relu(self.conv(x)))  # (B, in_caps, primary_dim)
        poses, pre_squash = self.routing(self.votes(u), return_pre_squash=True)  # (B, num_classes, class_dim) each
        lengths = poses.norm(dim=-1)  # (B, num_classes)
        recon = decode(self.decoder, poses, lengths, labels)
        return ModelOutput(scores=lengths, logits=capsule_logits(lengths), poses=poses, reconstructions=recon,
                           pre_squash=pre_squash)

    def vote_logits(self, x: torch.Tensor) -> torch.Tensor:
        """Vote surrogate: class capsules squash(mean_i u_hat_j|i), uniform coupling instead of routing (Gu et al.,
        "Effective and Efficient Vote Attack on Capsule Networks", arXiv:2102.10055). (B, C, H, W) -> (B, classes)."""
        votes = self.votes(self.primary(F.relu(self.conv(x))))  # (B, in_caps, num_classes, class_dim)
        return capsule_logits(squash(votes.mean(dim=1)).norm(dim=-1))

    def reconstruct(self, poses: torch.Tensor, classes: torch.Tensor) -> torch.Tensor:
        """The decoder's image from the capsule of `classes` (B,) alone. poses (B, C, D) -> (B, C_in, H, W)."""
        if self.decoder is None:
            raise ValueError("this CapsNet has no decoder (decoder_hidden=()); it cannot reconstruct")
        return self.decoder(poses, classes)
