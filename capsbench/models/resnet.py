"""The CIFAR ResNets of He et al. (6n+2 layers, parameter-free option-A shortcuts) and their convolutional trunk."""

from __future__ import annotations

import re

import torch
from torch import nn
from torch.nn import functional as F

from capsbench.errors import CapsbenchError
from capsbench.models.base import SoftmaxClassifier

STAGES = 3  # feature-map sizes H, H/2, H/4 with width, 2 width, 4 width filters


def _per_channel(values: float | tuple[float, ...], channels: int, name: str) -> torch.Tensor:
    """(channels,) -> (1, channels, 1, 1): one value for every channel, or one per channel."""
    vals = (float(values),) if isinstance(values, (int, float)) else tuple(float(v) for v in values)
    if len(vals) == 1:
        vals = vals * channels
    if len(vals) != channels:
        raise ValueError(f"{name} needs 1 or {channels} values (one per input channel), got {len(vals)}: {vals}")
    return torch.tensor(vals).view(1, channels, 1, 1)


class BasicBlock(nn.Module):
    """conv 3x3 (stride) -> BN -> ReLU -> conv 3x3 -> BN, plus the shortcut, then ReLU (He et al., fig. 2).

    Where the block halves the map and doubles the filters, the shortcut is option A: the input subsampled
    by the stride, with zero channels appended (no parameters).
    Shapes: (B, in_ch, H, W) -> (B, out_ch, ceil(H / stride), ceil(W / stride)).
    """

    def __init__(self, *, in_ch: int, out_ch: int, stride: int) -> None:
        super().__init__()
        if out_ch < in_ch:
            raise ValueError(f"option-A shortcuts only add channels, got {in_ch} -> {out_ch}")
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.stride, self.extra = stride, out_ch - in_ch

    def shortcut(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride > 1:
            x = x[:, :, :: self.stride, :: self.stride]  # (B, in_ch, ceil(H / s), ceil(W / s))
        return F.pad(x, (0, 0, 0, 0, 0, self.extra)) if self.extra else x  # (B, out_ch, H', W'), zeros appended

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNetTrunk(nn.Module):
    """Input normalisation, conv 3x3 -> BN -> ReLU, then three stages of `blocks` BasicBlocks with width, 2 width,
    4 width filters (the first block of stages 2 and 3 has stride 2): the 6n+1 conv layers of He et al.'s CIFAR nets.

    "Deep Residual Learning for Image Recognition", He, Zhang, Ren, Sun, arXiv:1512.03385, section 4.2.

    Args:
        in_channels: of the images; blocks: n, blocks per stage; width: filters of the first stage (paper: 16).
        mean, std: the input normalisation (x - mean) / std, per channel (one value, or one per channel).
    Shapes: (B, in_channels, H, W) in [0, 1] -> (B, 4 width, ceil(H / 4), ceil(W / 4)).
    """

    def __init__(
        self, *, in_channels: int, blocks: int, width: int = 16,
        mean: float | tuple[float, ...] = 0.5, std: float | tuple[float, ...] = 0.5,
    ) -> None:
        super().__init__()
        if blocks < 1 or width < 1:
            raise ValueError(f"a CIFAR ResNet needs blocks >= 1 and width >= 1, got blocks={blocks}, width={width}")
        self.register_buffer("mean", _per_channel(mean, in_channels, "mean"), persistent=False)
        self.register_buffer("std", _per_channel(std, in_channels, "std"), persistent=False)
        self.stem = nn.Sequential(nn.Conv2d(in_channels, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU())
        layers: list[nn.Module] = []
        prev = width
        for stage in range(STAGES):
            ch = width * 2 ** stage
            for i in range(blocks):
                layers.append(BasicBlock(in_ch=prev, out_ch=ch, stride=2 if stage > 0 and i == 0 else 1))
                prev = ch
        self.stages = nn.Sequential(*layers)
        self.out_channels = prev
        for m in self.modules():
            if isinstance(m, nn.Conv2d):  # He et al. initialise as in their PReLU paper (arXiv:1502.01852)
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")

    @staticmethod
    def output_size(image_size: int) -> int:
        for _ in range(STAGES - 1):
            image_size = (image_size - 1) // 2 + 1
        return image_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stages(self.stem((x - self.mean) / self.std))


def resnet_blocks(name: str) -> int:
    """'resnet20' -> 3: the blocks per stage n of a 6n+2-layer CIFAR ResNet named by its depth."""
    match = re.fullmatch(r"resnet(\d+)", name)
    depth = int(match.group(1)) if match else 0
    if depth < 8 or (depth - 2) % 6:
        raise CapsbenchError(f"{name!r} is not a CIFAR ResNet: expected 'resnetD' with depth D = 6n + 2, n >= 1 "
                         f"(resnet8, resnet20, resnet32, resnet44, resnet56, resnet110, ...)")
    return (depth - 2) // 6


class CifarResNet(SoftmaxClassifier):
    """He et al.'s CIFAR-10 ResNet: the trunk, global average pooling, one linear class layer (6n+2 weighted layers).

    "Deep Residual Learning for Image Recognition", He, Zhang, Ren, Sun, arXiv:1512.03385, section 4.2;
    n = 3, 9, 18 give ResNet-20, -56, -110 with 0.27 M, 0.85 M, 1.7 M parameters (Table 6).
    Inputs in [0, 1] are mapped to [-1, 1] per channel by default ((x - 0.5) / 0.5; the paper subtracts the
    per-pixel mean; with BN after the first conv, an affine input map only changes the zero-padded borders).

    Args:
        in_channels, image_size, num_classes: of the dataset.
        blocks: n, residual blocks per stage; width: filters of the first stage (paper: 16).
        mean, std: the input normalisation, per channel (one value, or one per channel).
    Shapes: (B, in_channels, H, W) -> logits (B, num_classes).
    """

    ARGUMENT_RANGES = {  # checked before any work (capsbench.models.ranges)
        "blocks": "int [1, inf)",
        "width": "int [1, inf)",
        "std": "(0, inf)",
    }

    def __init__(
        self,
        *,
        in_channels: int = 1,
        image_size: int = 28,
        num_classes: int = 10,
        blocks: int = 3,
        width: int = 16,
        mean: float | tuple[float, ...] = 0.5,
        std: float | tuple[float, ...] = 0.5,
    ):
        super().__init__()
        self.trunk = ResNetTrunk(in_channels=in_channels, blocks=blocks, width=width, mean=mean, std=std)
        self.fc = nn.Linear(self.trunk.out_channels, num_classes)

    def class_logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.trunk(x).mean(dim=(2, 3)))  # (B, 4 width) -> (B, num_classes)
