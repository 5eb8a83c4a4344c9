"""The smallNORB baseline CNN of "Matrix Capsules with EM Routing" (Hinton, Sabour, Frosst, ICLR 2018, OpenReview
HJWLfGWRb, section 5): two 5x5 convolutions with 2x2 max pooling, a 1024-unit layer with dropout, a softmax."""

from __future__ import annotations

import torch

from capsbench.models.base import SoftmaxClassifier
from capsbench.models.cnn_pooled import fc_head, pooled_features

STD_EPS = 1e-5  # keeps a blank image's standardisation finite


class SmallNorbCNN(SoftmaxClassifier):
    """Conv 32@5x5, stride 1, ReLU, 2x2 max pool -> conv 64@5x5, ReLU, 2x2 max pool -> FC 1024, ReLU, dropout ->
    class logits. "Same" padding: on the paper's 32x32 crops the flattened features are 8x8x64, and the model has
    4,252,549 parameters, the paper's "4.2M" (Table 1 and section 5). Each image is standardised to zero mean and unit
    variance inside the model, as the paper prepares every smallNORB image for both the capsules and this baseline.

    Args:
        in_channels, image_size, num_classes: of the dataset (smallNORB: 1, 32 after cropping, 5).
        channels, kernel_size: of the two conv layers; fc: hidden FC sizes; dropout: before the class layer.
    Shapes: (B, in_channels, H, W) -> logits (B, num_classes).
    """

    def __init__(
        self,
        *,
        in_channels: int = 1,
        image_size: int = 28,
        num_classes: int = 10,
        channels: tuple[int, ...] = (32, 64),
        kernel_size: int = 5,
        fc: tuple[int, ...] = (1024,),
        dropout: float = 0.5,
    ):
        super().__init__()
        self.features, flat = pooled_features(in_channels, image_size, channels, (kernel_size,) * len(channels))
        self.classifier = fc_head(flat, fc, num_classes, dropout)

    def class_logits(self, x: torch.Tensor) -> torch.Tensor:
        mean, std = x.mean(dim=(1, 2, 3), keepdim=True), x.std(dim=(1, 2, 3), keepdim=True)
        h = self.features((x - mean) / (std + STD_EPS))  # (B, 64, H/4, W/4)
        return self.classifier(h.flatten(1))  # (B, num_classes)
