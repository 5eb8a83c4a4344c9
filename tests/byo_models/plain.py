"""Plain PyTorch modules returning (B, C) logits, as users write them (no capsbench import)."""

import torch
from torch import nn


class PlainNet(nn.Module):
    """A tiny CNN returning logits."""

    def __init__(self, num_classes=10, width=4):
        super().__init__()
        self.conv = nn.Conv2d(1, width, 5, stride=2)
        self.fc = nn.Linear(width * 12 * 12, num_classes)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).flatten(1))


def make_plain(*, width=4, num_classes=10) -> PlainNet:
    """A factory: PlainNet built by a function."""
    return PlainNet(num_classes=num_classes, width=width)


class Centroid(nn.Module):
    """A linear nearest-centroid classifier on 28x28 images: logits_k = w_k . x - |w_k|^2 / 2."""

    def __init__(self, num_classes=10, image_size=28):
        super().__init__()
        self.linear = nn.Linear(image_size * image_size, num_classes)

    def forward(self, x):
        return self.linear(x.flatten(1))


class NeedsDepth(nn.Module):
    """A module with a required argument."""

    def __init__(self, depth, num_classes=10):
        super().__init__()
        self.fc = nn.Linear(28 * 28, num_classes * depth)

    def forward(self, x):
        return self.fc(x.flatten(1))
