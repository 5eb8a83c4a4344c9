"""Capsule-style external models: class capsules from a linear map, with and without hooks, in every output form."""

import torch
from torch import nn

EPS = 1e-8


def squash(s):
    sq = (s * s).sum(-1, keepdim=True)
    return sq / (1 + sq) * s / torch.sqrt(sq + EPS)


class Caps(nn.Module):
    """Class capsules (B, 10, 4) = squash(linear(x)); a dict of lengths, poses and pre_squash, and vote_logits."""

    def __init__(self, num_classes=10, dim=4, image_size=28):
        super().__init__()
        self.num_classes, self.dim = num_classes, dim
        self.linear = nn.Linear(image_size * image_size, num_classes * dim)

    def pre(self, x):
        return self.linear(x.flatten(1)).view(len(x), self.num_classes, self.dim)

    def forward(self, x):
        s = self.pre(x)
        v = squash(s)
        return {"lengths": v.norm(dim=-1), "poses": v, "pre_squash": s}

    def vote_logits(self, x):
        lengths = squash(self.pre(x)).norm(dim=-1)
        return torch.log(lengths + EPS) - torch.log(lengths.sum(-1, keepdim=True) + EPS)


class CapsLengths(Caps):
    """The lengths tensor alone, declared; no hook."""

    capsbench_outputs = "lengths"
    vote_logits = None

    def forward(self, x):
        return super().forward(x)["lengths"]


class CapsTuple(Caps):
    """A tuple (lengths, poses), declared by position."""

    capsbench_outputs = ("lengths", "poses")

    def forward(self, x):
        out = super().forward(x)
        return out["lengths"], out["poses"]


class CapsTupleUndeclared(Caps):
    """A tuple whose entries are not named."""

    def forward(self, x):
        out = super().forward(x)
        return out["lengths"], out["poses"]


class CapsRenamed(Caps):
    """A dict with its own key names, renamed by the declaration."""

    capsbench_outputs = {"caps_len": "lengths", "s": "pre_squash"}

    def forward(self, x):
        out = super().forward(x)
        return {"caps_len": out["lengths"], "s": out["pre_squash"], "extra": 1}
