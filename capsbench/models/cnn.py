"""CNN baselines: Sabour et al.'s MNIST baseline and a 9x9-kernel CNN of CapsNet's size (Gu et al., CVPR 2021)."""

from __future__ import annotations

import torch
from torch import nn

from capsbench.models.base import SoftmaxClassifier


class ConvNet(SoftmaxClassifier):
    """Plain CNN: conv layers (ReLU, no pooling) -> FC layers (ReLU) -> dropout -> class logits.

    Args:
        in_channels, image_size, num_classes: of the dataset.
        channels: output channels of each conv layer.
        kernel_size: of every conv; padding: "same" or "valid".
        fc: hidden FC sizes; dropout: before the class layer.
        mean, std: input normalisation, applied inside the model (inputs stay in [0, 1]).
    Shapes: (B, in_channels, H, W) -> logits (B, num_classes).
    """

    ARGUMENT_RANGES = {  # checked before any work (capsbench.models.ranges)
        "channels": "int [1, inf)",
        "kernel_size": "int [1, inf)",
        "padding": ["same", "valid"],
        "fc": "int [1, inf)",
        "dropout": "[0, 1)",
        "std": "(0, inf)",
    }

    def __init__(
        self,
        *,
        in_channels: int = 1,
        image_size: int = 28,
        num_classes: int = 10,
        channels: tuple[int, ...] = (256, 256, 128),
        kernel_size: int = 5,
        padding: str = "same",
        fc: tuple[int, ...] = (328, 192),
        dropout: float = 0.5,
        mean: float = 0.1307,
        std: float = 0.3081,
    ):
        super().__init__()
        if padding not in ("same", "valid"):
            raise ValueError(f"padding must be 'same' or 'valid', got {padding!r}")
        self.mean, self.std = mean, std
        convs: list[nn.Module] = []
        size, prev = image_size, in_channels
        for ch in channels:
            convs += [nn.Conv2d(prev, ch, kernel_size, padding=padding), nn.ReLU(inplace=True)]
            prev = ch
            size = size if padding == "same" else size - kernel_size + 1
        if size < 1:
            raise ValueError(
                f"image_size {image_size} is too small for {len(channels)} valid {kernel_size}x{kernel_size} convs"
            )
        self.features = nn.Sequential(*convs)
        dims = [prev * size * size, *fc]
        layers: list[nn.Module] = []
        for a, b in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(a, b), nn.ReLU(inplace=True)]
        layers += [nn.Dropout(dropout), nn.Linear(dims[-1], num_classes)]
        self.classifier = nn.Sequential(*layers)
        # Conv weights channels-last, so every conv runs oneDNN's NHWC kernels: a quick-budget training step
        # (forward, backward, Adam) took 1.20x less time for cnn_sabour and 1.16x for cnn_9x9 on a 2-core CPU.
        self.features.to(memory_format=torch.channels_last)

    def class_logits(self, x: torch.Tensor) -> torch.Tensor:
        h = self.features((x - self.mean) / self.std)  # (B, C, H', W')
        return self.classifier(h.flatten(1))  # (B, num_classes)
