"""Sabour et al.'s MultiMNIST baseline CNN: convolutions with max pooling, then fully connected layers."""

from __future__ import annotations

import torch
from torch import nn

from capsbench.models.base import SoftmaxClassifier


class PooledConvNet(SoftmaxClassifier):
    """Conv ("same", ReLU, 2x2/2 max pool) per layer -> FC layers (ReLU) -> class logits; no dropout.

    The MultiMNIST baseline of "Dynamic Routing Between Capsules" (Sabour et al., arXiv:1710.09829,
    section 6): conv 512@9x9, pool, conv 256@5x5, pool, FC 1024, FC 10, trained with sigmoid
    cross-entropy on multi-hot targets; 24.56 M parameters on 36x36 inputs.

    Args:
        in_channels, image_size, num_classes: of the dataset.
        channels, kernel_sizes: one entry per conv layer (paper: (512, 256), (9, 5)).
        fc: hidden FC sizes (paper: (1024,)).
        mean, std: input normalisation, applied inside the model (inputs stay in [0, 1]).
    Shapes: (B, in_channels, H, W) -> logits (B, num_classes).
    """

    ARGUMENT_RANGES = {  # checked before any work (capsbench.models.ranges)
        "channels": "int [1, inf)",
        "kernel_sizes": "int [1, inf)",
        "fc": "int [1, inf)",
        "std": "(0, inf)",
    }

    def __init__(
        self,
        *,
        in_channels: int = 1,
        image_size: int = 28,
        num_classes: int = 10,
        channels: tuple[int, ...] = (512, 256),
        kernel_sizes: tuple[int, ...] = (9, 5),
        fc: tuple[int, ...] = (1024,),
        mean: float = 0.1307,
        std: float = 0.3081,
    ):
        super().__init__()
        if len(channels) != len(kernel_sizes):
            raise ValueError(f"channels {channels} and kernel_sizes {kernel_sizes} need one entry per conv layer")
        self.mean, self.std = mean, std
        self.features, flat = pooled_features(in_channels, image_size, channels, kernel_sizes)
        self.classifier = fc_head(flat, fc, num_classes)

    def class_logits(self, x: torch.Tensor) -> torch.Tensor:
        h = self.features((x - self.mean) / self.std)  # (B, C, H', W')
        return self.classifier(h.flatten(1))  # (B, num_classes)


def pooled_features(in_channels: int, image_size: int, channels: tuple[int, ...],
                    kernel_sizes: tuple[int, ...]) -> tuple[nn.Sequential, int]:
    """Conv ("same", ReLU, 2x2/2 max pool) per layer, and the length of its flattened output."""
    layers: list[nn.Module] = []
    size, prev = image_size, in_channels
    for ch, k in zip(channels, kernel_sizes):
        layers += [nn.Conv2d(prev, ch, k, padding="same"), nn.ReLU(inplace=True), nn.MaxPool2d(2, 2)]
        prev, size = ch, size // 2
    if size < 1:
        raise ValueError(f"image_size {image_size} is too small for {len(channels)} 2x2 poolings")
    return nn.Sequential(*layers), prev * size * size


def fc_head(flat: int, fc: tuple[int, ...], num_classes: int, dropout: float = 0.0) -> nn.Sequential:
    """FC layers (ReLU) from `flat` features, dropout before the class layer when > 0, then the class logits."""
    dims = [flat, *fc]
    head: list[nn.Module] = []
    for a, b in zip(dims[:-1], dims[1:]):
        head += [nn.Linear(a, b), nn.ReLU(inplace=True)]
    if dropout > 0:
        head.append(nn.Dropout(dropout))
    head.append(nn.Linear(dims[-1], num_classes))
    return nn.Sequential(*head)
