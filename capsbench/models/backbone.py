"""The small convolutional backbone shared by self-routing capsules and their average-pooling CNN baseline."""

from __future__ import annotations

import torch
from torch import nn

from capsbench.models.base import SoftmaxClassifier


class SmallBackbone(nn.Sequential):
    """3x3 conv -> BN -> ReLU blocks (padding 1), as the plain-CNN backbone of Hahn et al. 2019.

    Args:
        in_channels: of the images; channels, strides: one entry per block.
    Shapes: (B, in_channels, H, W) -> (B, channels[-1], H', W'), H' = H / prod(strides) rounded up.
    """

    def __init__(self, *, in_channels: int, channels: tuple[int, ...], strides: tuple[int, ...]):
        if len(channels) != len(strides) or not channels:
            raise ValueError(f"need one stride per backbone block, got channels={channels}, strides={strides}")
        layers: list[nn.Module] = []
        prev = in_channels
        for ch, s in zip(channels, strides):
            layers += [nn.Conv2d(prev, ch, 3, s, 1, bias=False), nn.BatchNorm2d(ch), nn.ReLU(inplace=True)]
            prev = ch
        super().__init__(*layers)
        self.out_channels = prev

    @staticmethod
    def output_size(image_size: int, strides: tuple[int, ...]) -> int:
        for s in strides:
            image_size = (image_size - 1) // s + 1
        return image_size


class AvgPoolCNN(SoftmaxClassifier):
    """Hahn et al.'s AvgPool baseline: the backbone, global average pooling, one linear class layer.

    Args:
        in_channels, image_size, num_classes: of the dataset.
        backbone_channels, backbone_strides: of SmallBackbone (the same as srcapsnet's).
    Shapes: (B, in_channels, H, W) -> logits (B, num_classes).
    """

    ARGUMENT_RANGES = {  # checked before any work (capsbench.models.ranges)
        "backbone_channels": "int [1, inf)",
        "backbone_strides": "int [1, inf)",
    }

    def __init__(
        self,
        *,
        in_channels: int = 1,
        image_size: int = 28,
        num_classes: int = 10,
        backbone_channels: tuple[int, ...] = (64, 128, 128),
        backbone_strides: tuple[int, ...] = (1, 2, 2),
    ):
        super().__init__()
        self.backbone = SmallBackbone(in_channels=in_channels, channels=tuple(backbone_channels),
                                      strides=tuple(backbone_strides))
        self.fc = nn.Linear(self.backbone.out_channels, num_classes)

    def class_logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.backbone(x).mean(dim=(2, 3)))  # (B, channels[-1]) -> (B, num_classes)
