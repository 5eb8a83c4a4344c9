"""Self-routing capsule layer from Hahn, Pyeon, Kim, "Self-Routing Capsule Networks" (NeurIPS 2019)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

ROUTE_EPS = 1e-8  # keeps the activation-weighted means finite where every child in a window is inactive


class SelfRouting2d(nn.Module):
    """Convolutional capsule layer with self-routing: every child routes itself, no iterations.

    For child i (a kernel position and capsule type) and parent type j (Hahn et al., eq. 1-4):
        c_ij = softmax_j(W^route_i u_i + b_i)           (routing over parents, sums to 1 over j)
        a_j = sum_i c_ij a_i / sum_i a_i                 (parent activation)
        u_j = sum_i c_ij a_i W^pose_ij u_i / sum_i c_ij a_i  (parent pose)
    Transformation and routing weights are shared across positions, distinct per kernel position.
    A layer whose kernel covers the whole grid (padding 0) is a fully connected capsule layer; its
    activations then sum to 1 over parents.

    Args:
        in_types, out_types: capsule types A -> B.
        in_dim, out_dim: pose dimensions C -> D.
        kernel_size, stride, padding: of the convolution over capsule grids.
        pose_out: compute parent poses (False for a final layer whose activations are the output).
    Shapes: a (N, A, H, W), pose (N, A*C, H, W) -> a (N, B, H', W'), pose (N, B*D, H', W') or None.
    """

    def __init__(
        self, *, in_types: int, out_types: int, in_dim: int, out_dim: int,
        kernel_size: int = 3, stride: int = 1, padding: int = 0, pose_out: bool = True,
    ):
        super().__init__()
        self.in_types, self.out_types, self.in_dim, self.out_dim = in_types, out_types, in_dim, out_dim
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        n_children = kernel_size * kernel_size * in_types
        self.route_weight = nn.Parameter(torch.empty(n_children, out_types, in_dim))
        self.route_bias = nn.Parameter(torch.zeros(n_children, out_types))
        nn.init.kaiming_uniform_(self.route_weight)
        self.pose_weight = None
        if pose_out:
            self.pose_weight = nn.Parameter(torch.empty(n_children, out_types * out_dim, in_dim))
            nn.init.kaiming_uniform_(self.pose_weight)

    def _patches(self, t: torch.Tensor, dim: int) -> torch.Tensor:
        """(N, A*dim, H, W) -> (N, L, kk*A, dim): the children of each of the L output positions."""
        n = t.shape[0]
        cols = F.unfold(t, self.kernel_size, padding=self.padding, stride=self.stride)  # (N, A*dim*kk, L)
        cols = cols.view(n, self.in_types, dim, self.kernel_size ** 2, -1)  # (N, A, dim, kk, L)
        return cols.permute(0, 4, 3, 1, 2).reshape(n, cols.shape[-1], -1, dim)  # (N, L, kk*A, dim)

    def routing(self, pose: torch.Tensor) -> torch.Tensor:
        """Coupling c_ij of each child over parent types: (N, L, kk*A, C) -> (N, L, kk*A, B), sums to 1 over B."""
        logits = torch.einsum("nlic,ijc->nlij", pose, self.route_weight) + self.route_bias  # (N, L, kk*A, B)
        return torch.softmax(logits, dim=-1)

    def forward(self, a: torch.Tensor, pose: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        n, _, h, w = a.shape
        out_h = (h + 2 * self.padding - self.kernel_size) // self.stride + 1
        out_w = (w + 2 * self.padding - self.kernel_size) // self.stride + 1
        children = self._patches(pose, self.in_dim)  # (N, L, kk*A, C)
        a_children = self._patches(a, 1).squeeze(-1)  # (N, L, kk*A)
        c = self.routing(children)  # (N, L, kk*A, B)
        ac = a_children.unsqueeze(-1) * c  # (N, L, kk*A, B)
        ac_sum = ac.sum(dim=2)  # (N, L, B)
        a_out = ac_sum / (a_children.sum(dim=2, keepdim=True) + ROUTE_EPS)  # (N, L, B)
        a_out = a_out.transpose(1, 2).reshape(n, self.out_types, out_h, out_w)
        if self.pose_weight is None:
            return a_out, None
        votes = torch.einsum("nlic,iec->nlie", children, self.pose_weight)  # (N, L, kk*A, B*D)
        votes = votes.view(*votes.shape[:3], self.out_types, self.out_dim)  # (N, L, kk*A, B, D)
        weights = ac / (ac_sum.unsqueeze(2) + ROUTE_EPS)  # (N, L, kk*A, B)
        pose_out = (weights.unsqueeze(-1) * votes).sum(dim=2)  # (N, L, B, D)
        pose_out = pose_out.flatten(2).transpose(1, 2).reshape(n, self.out_types * self.out_dim, out_h, out_w)
        return a_out, pose_out
