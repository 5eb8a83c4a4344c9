"""Routing-by-agreement from Sabour, Frosst, Hinton, "Dynamic Routing Between Capsules" (arXiv:1710.09829)."""

from __future__ import annotations

import torch
from torch import nn

from capsbench.models.capsules import squash


class DynamicRouting(nn.Module):
    """Dynamic routing (Procedure 1 of the paper).

    Coupling coefficients c = softmax(b) over output capsules; s_j = sum_i c_ij u_hat_ij;
    v_j = squash(s_j); b_ij += u_hat_ij . v_j between iterations.

    Args:
        iterations: routing iterations r (>= 1; Sabour: 3).
    Shapes: u_hat (B, in_caps, out_caps, out_dim) -> v (B, out_caps, out_dim).
    """

    def __init__(self, *, iterations: int = 3):
        super().__init__()
        if iterations < 1:
            raise ValueError(f"routing iterations must be >= 1, got {iterations}")
        self.iterations = iterations

    def forward(self, u_hat: torch.Tensor, return_coupling: bool = False):
        batch, in_caps, out_caps, out_dim = u_hat.shape
        # One copy into the layout both batched matmuls read: rows are (image, output capsule).
        votes = u_hat.permute(0, 2, 1, 3).reshape(batch * out_caps, in_caps, out_dim)  # (B*out, in, D)
        b_logits = u_hat.new_zeros(batch, out_caps, in_caps)  # (B, out, in)
        for it in range(self.iterations):
            c = torch.softmax(b_logits, dim=1)  # (B, out, in): sums to 1 over output capsules
            s = torch.bmm(c.reshape(batch * out_caps, 1, in_caps), votes)  # (B*out, 1, D)
            v = squash(s.view(batch, out_caps, out_dim))  # (B, out, D)
            if it < self.iterations - 1:
                agreement = torch.bmm(votes, v.view(batch * out_caps, out_dim, 1))  # (B*out, in, 1)
                b_logits = b_logits + agreement.view(batch, out_caps, in_caps)
        return (v, c.transpose(1, 2)) if return_coupling else v
