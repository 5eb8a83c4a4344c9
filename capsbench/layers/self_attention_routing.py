"""Non-iterative self-attention routing of Efficient-CapsNet (Mazzia et al. 2021, arXiv:2101.12491)."""

from __future__ import annotations

import math

import torch
from torch import nn

from capsbench.layers.straight_through import saturating

NORM_EPS = 1e-7


def exp_squash(s: torch.Tensor, dim: int = -1, eps: float = NORM_EPS) -> torch.Tensor:
    """Efficient-CapsNet's squash v = (1 - 1 / exp(|s|)) s / |s|: norms in [0, 1), zero maps to zero."""
    norm = torch.sqrt((s * s).sum(dim=dim, keepdim=True) + eps * eps)
    return (1.0 - torch.exp(-norm)) * s / norm


class SelfAttentionRouting(nn.Module):
    """Fully connected capsule layer with self-attention routing (Mazzia et al. 2021, eq. 4-7).

    Votes u_hat[j, i] = W[j, i] u[i]; per output capsule j the self-attention matrix
    A_j = U_j U_j^T / sqrt(out_dim) over its votes is summed over columns, softmax-ed over output
    capsules (each input capsule distributes one unit of coupling over its parents), shifted by a
    learned prior b[j, i], and s_j = sum_i c[j, i] u_hat[j, i], v_j = exp_squash(s_j).

    Args:
        in_caps, in_dim: input capsules (Efficient-CapsNet MNIST: 16 of 8D).
        out_caps, out_dim: output capsules (10 of 16D).
    Shapes: u (B, in_caps, in_dim) -> v (B, out_caps, out_dim); with return_coupling also the coupling
    (B, out_caps, in_caps), with return_pre_squash also s (B, out_caps, out_dim), in that order.
    """

    def __init__(self, *, in_caps: int, in_dim: int, out_caps: int, out_dim: int):
        super().__init__()
        self.out_dim = out_dim
        self.weight = nn.Parameter(torch.empty(out_caps, in_caps, in_dim, out_dim))
        nn.init.kaiming_normal_(self.weight.view(out_caps * in_caps, in_dim, out_dim))
        self.prior = nn.Parameter(torch.zeros(out_caps, in_caps, 1))

    def coupling(self, votes: torch.Tensor) -> torch.Tensor:
        """Softmax over output capsules of the column-summed self-attention: (B, out, in, D) -> (B, out, in)."""
        attention = votes @ votes.transpose(-1, -2) / math.sqrt(self.out_dim)  # (B, out, in, in)
        return torch.softmax(attention.sum(dim=-1), dim=1)  # (B, out, in): sums to 1 over out

    def votes(self, u: torch.Tensor) -> torch.Tensor:
        """u_hat[j, i] = W[j, i] u[i]: (B, in, in_dim) -> (B, out, in, out_dim)."""
        return torch.einsum("bid,jide->bjie", u, self.weight)

    def forward(self, u: torch.Tensor, return_coupling: bool = False, return_pre_squash: bool = False):
        votes = self.votes(u)  # (B, out, in, out_dim)
        c = self.coupling(votes) + self.prior.squeeze(-1)  # (B, out, in)
        s = (c.unsqueeze(-1) * votes).sum(dim=2)  # (B, out, out_dim)
        v = saturating(exp_squash, s)
        extras = ((c,) if return_coupling else ()) + ((s,) if return_pre_squash else ())
        return (v, *extras) if extras else v
