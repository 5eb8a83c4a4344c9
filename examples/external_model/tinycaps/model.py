"""A small CapsNet (Sabour, Frosst, Hinton, "Dynamic Routing Between Capsules", arXiv:1710.09829) in plain PyTorch.

TinyCaps returns a dict that capsbench reads by its keys: the class-capsule `lengths` (the scores), the `poses`, and
the class capsules before their squash, `pre_squash` (a capsule hook: capsbench's adaptive PGD attacks their norms);
`vote_logits(x)` is the second hook (the Vote attack of Gu et al. 2021). TinyCapsLengths is the same network with the
same weights that returns the lengths alone and offers no hook.
"""

from __future__ import annotations

import torch
from torch import nn

EPS = 1e-8


def squash(s: torch.Tensor) -> torch.Tensor:
    """v = |s|^2 / (1 + |s|^2) * s / |s| over the last dimension: lengths in [0, 1)."""
    sq = (s * s).sum(dim=-1, keepdim=True)
    return sq / (1.0 + sq) * s / torch.sqrt(sq + EPS)


class TinyCaps(nn.Module):
    """A small CapsNet: conv 9x9, primary capsules 9x9/2, class capsules by 3 iterations of dynamic routing.

    Returns a dict of lengths, poses and pre_squash, and offers vote_logits(x). Inputs: (B, in_channels, image_size,
    image_size) in [0, 1]."""

    def __init__(self, in_channels: int = 1, image_size: int = 28, num_classes: int = 10, conv_channels: int = 16,
                 primary_types: int = 8, primary_dim: int = 8, class_dim: int = 8, routing_iterations: int = 3):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, conv_channels, 9)
        self.primary = nn.Conv2d(conv_channels, primary_types * primary_dim, 9, stride=2)
        grid = (image_size - 8 - 9) // 2 + 1
        self.primary_dim, self.routing_iterations = primary_dim, routing_iterations
        self.weight = nn.Parameter(0.05 * torch.randn(primary_types * grid * grid, num_classes, class_dim, primary_dim))

    def votes(self, x: torch.Tensor) -> torch.Tensor:
        """(B, in_caps, classes, class_dim): each primary capsule's prediction of each class capsule."""
        u = self.primary(torch.relu(self.conv(x)))  # (B, types * dim, g, g)
        b, _, g, _ = u.shape
        u = u.view(b, -1, self.primary_dim, g, g).permute(0, 1, 3, 4, 2).reshape(b, -1, self.primary_dim)
        return torch.einsum("ncdp,bnp->bncd", self.weight, squash(u))

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        u_hat = self.votes(x)
        logits = torch.zeros(u_hat.shape[:3], device=x.device)  # (B, in_caps, classes) routing logits
        for i in range(self.routing_iterations):
            c = logits.softmax(dim=2)
            s = (c.unsqueeze(-1) * u_hat).sum(dim=1)  # (B, classes, class_dim), before the squash
            v = squash(s)
            if i < self.routing_iterations - 1:
                logits = logits + (u_hat * v.unsqueeze(1)).sum(dim=-1)
        return {"lengths": v.norm(dim=-1), "poses": v, "pre_squash": s}

    def vote_logits(self, x: torch.Tensor) -> torch.Tensor:
        """Log-normalised lengths of squash(mean of the votes): uniform coupling instead of routing."""
        lengths = squash(self.votes(x).mean(dim=1)).norm(dim=-1)
        return torch.log(lengths + EPS) - torch.log(lengths.sum(dim=-1, keepdim=True) + EPS)


class TinyCapsLengths(TinyCaps):
    """TinyCaps returning only its (B, classes) capsule lengths, with no capsule hook."""

    capsbench_outputs = "lengths"  # tells capsbench that the tensor holds capsule lengths, not logits
    vote_logits = None  # no vote hook

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x)["lengths"]
