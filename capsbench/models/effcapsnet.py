"""Efficient-CapsNet (Mazzia, Salvetti, Chiaberge, "Efficient-CapsNet: capsule network with self-attention
routing", arXiv:2101.12491): a small conv stem, depthwise primary capsules, self-attention routing."""

from __future__ import annotations

import torch
from torch import nn

from capsbench.layers.capsules import Decoder, capsule_logits, decode
from capsbench.layers.self_attention_routing import SelfAttentionRouting, exp_squash
from capsbench.layers.straight_through import saturating
from capsbench.models.base import ModelOutput
from capsbench.models.vector_capsules import VectorCapsuleClassifier


class EfficientCapsNet(VectorCapsuleClassifier):
    """Conv stem (conv -> ReLU -> BN) -> depthwise primary capsules -> self-attention class capsules.

    Defaults are the paper's MNIST model: convs 32@5x5, 64@3x3, 64@3x3, 128@3x3/2; a depthwise conv
    over the whole remaining grid gives 16 primary capsules of 8D; 10 class capsules of 16D;
    161,824 parameters without the reconstruction decoder (PyTorch counts BN's affine weights only).
    The authors' smallNORB model (EscVM/Efficient-CapsNet, models/efficient_capsnet_graph_smallnorb.py) has the
    first conv 7x7/2 (kernels=(7, 3, 3, 3), strides=(2, 1, 1, 2)), instance norm with affine weights where this has
    BN (the same count) and LeakyReLU; on its 2-channel 48x48 input the grid is 8x8 and it counts 151,664.

    Args:
        in_channels, image_size, num_classes: of the dataset.
        channels, kernels, strides: output channels, kernel sizes and strides of the four stem convs.
        primary_caps, primary_dim: primary capsules; primary_caps * primary_dim == channels[-1].
        class_dim: class capsule dimension.
        decoder_hidden: reconstruction decoder FC sizes; () disables it.
        recon_weight: weight of the sum-squared reconstruction error (paper: 0.392 x MSE over 784 pixels,
            i.e. 0.0005 x the sum).
    Shapes: (B, in_channels, H, W) -> scores (B, num_classes), poses (B, num_classes, class_dim).
    """

    ARGUMENT_RANGES = {  # checked before any work (capsbench.models.ranges)
        "channels": "int [1, inf)",
        "kernels": "int [1, inf)",
        "strides": "int [1, inf)",
        "primary_caps": "int [1, inf)",
        "primary_dim": "int [1, inf)",
        "class_dim": "int [1, inf)",
        "decoder_hidden": "int [1, inf)",
        "recon_weight": "[0, inf)",
    }

    def __init__(
        self,
        *,
        in_channels: int = 1,
        image_size: int = 28,
        num_classes: int = 10,
        channels: tuple[int, int, int, int] = (32, 64, 64, 128),
        kernels: tuple[int, int, int, int] = (5, 3, 3, 3),
        strides: tuple[int, int, int, int] = (1, 1, 1, 2),
        primary_caps: int = 16,
        primary_dim: int = 8,
        class_dim: int = 16,
        decoder_hidden: tuple[int, ...] = (512, 1024),
        recon_weight: float = 0.0005,
    ):
        super().__init__()
        if len(channels) != 4 or primary_caps * primary_dim != channels[-1]:
            raise ValueError(
                f"need 4 stem channels with primary_caps * primary_dim == channels[-1], got channels={channels}, "
                f"primary_caps={primary_caps}, primary_dim={primary_dim}"
            )
        if len(kernels) != 4 or len(strides) != 4:
            raise ValueError(f"need a kernel size and a stride per stem conv (4 each), got {kernels}, {strides}")
        layers: list[nn.Module] = []
        prev, size = in_channels, image_size
        for ch, k, stride in zip(channels, kernels, strides):
            if size < k:
                raise ValueError(f"image_size {image_size} is too small for this Efficient-CapsNet stem (kernels "
                                 f"{kernels}, strides {strides})")
            layers += [nn.Conv2d(prev, ch, k, stride), nn.ReLU(inplace=True), nn.BatchNorm2d(ch)]
            prev, size = ch, (size - k) // stride + 1
        self.stem = nn.Sequential(*layers)
        self.primary = nn.Conv2d(prev, prev, size, groups=prev)  # depthwise over the whole grid -> 1x1
        self.primary_caps, self.primary_dim = primary_caps, primary_dim
        self.routing = SelfAttentionRouting(
            in_caps=primary_caps, in_dim=primary_dim, out_caps=num_classes, out_dim=class_dim
        )
        self.recon_weight = recon_weight
        self.decoder = (
            Decoder(num_classes=num_classes, caps_dim=class_dim, hidden=tuple(decoder_hidden),
                    image_shape=(in_channels, image_size, image_size))
            if decoder_hidden
            else None
        )

    def primary_capsules(self, x: torch.Tensor) -> torch.Tensor:
        h = self.primary(self.stem(x))  # (B, channels[-1], 1, 1)
        return saturating(exp_squash, h.view(-1, self.primary_caps, self.primary_dim))  # (B, primary_caps, primary_dim)

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> ModelOutput:
        poses, pre_squash = self.routing(
            self.primary_capsules(x), return_pre_squash=True
        )  # (B, num_classes, class_dim)
        lengths = poses.norm(dim=-1)  # (B, num_classes)
        recon = decode(self.decoder, poses, lengths, labels)
        return ModelOutput(
            scores=lengths, logits=capsule_logits(lengths), poses=poses, reconstructions=recon, pre_squash=pre_squash
        )

    def vote_logits(self, x: torch.Tensor) -> torch.Tensor:
        """Vote surrogate (Gu et al., arXiv:2102.10055): exp_squash(mean_i u_hat_j|i), uniform coupling instead of
        self-attention routing (and without its learned prior). (B, C, H, W) -> (B, classes)."""
        votes = self.routing.votes(self.primary_capsules(x))  # (B, num_classes, primary_caps, class_dim)
        return capsule_logits(exp_squash(votes.mean(dim=2)).norm(dim=-1))
