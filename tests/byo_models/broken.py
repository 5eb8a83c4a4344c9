"""Models that break one rule of the contract each (for `capsbench check-model` and the run's pre-flight check)."""

import torch
from torch import nn

from byo_models.caps import Caps
from byo_models.plain import Centroid, PlainNet


class WrongClasses(PlainNet):
    """Five classes where the dataset has ten."""

    def __init__(self, width=4):
        super().__init__(num_classes=5, width=width)


class ReturnsText(PlainNet):
    """An output capsbench cannot read."""

    def forward(self, x):
        return "ten classes"


class ReturnsNaN(PlainNet):
    """NaN logits."""

    def forward(self, x):
        return super().forward(x) * float("nan")


class Random(PlainNet):
    """Different outputs on every eval-mode pass."""

    def forward(self, x):
        return super().forward(x + 0.01 * torch.rand_like(x))


class Detached(PlainNet):
    """Cuts the graph: no input gradient."""

    def forward(self, x):
        return super().forward(x.detach())


class NaNGradient(PlainNet):
    """A square root at zero: finite outputs, NaN input gradients."""

    def forward(self, x):
        return super().forward(torch.sqrt(x * 0.0))


class Expects255(nn.Module):
    """Expects 0..255 pixels: it divides by 255 itself, so [0, 1] pixels come out nearly black."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.inner = Centroid(num_classes=num_classes)

    def forward(self, x):
        return self.inner(x / 255.0)


class PreSquashReversed(Caps):
    """pre_squash that does not belong to the lengths it returns."""

    def forward(self, x):
        out = super().forward(x)
        return {**out, "pre_squash": -out["pre_squash"].flip(1)}


class FailsToBuild(nn.Module):
    """A constructor that raises."""

    def __init__(self, num_classes=10):
        super().__init__()
        raise ValueError("no such layer size")


class DisagreeingLogits(PlainNet):
    """A ModelOutput whose logits rank the classes against its scores."""

    def forward(self, x):
        from capsbench.models import ModelOutput

        logits = super().forward(x)
        return ModelOutput(scores=logits.softmax(1), logits=-logits)
