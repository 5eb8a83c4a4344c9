"""Matrix-capsule layers (4x4 poses + activations) of Hinton, Sabour, Frosst, "Matrix capsules with EM routing"
(ICLR 2018): primary, convolutional and class capsules; grids are (N, H, W, types, 16) and (N, H, W, types)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from capsbench.layers.em_routing import MIN_VARIANCE, EMRouting
from capsbench.layers.straight_through import saturating

POSE = 16  # a 4x4 pose matrix, flattened


class PrimaryMatrixCaps(nn.Module):
    """1x1 conv to `types` capsules: a 4x4 pose and a logistic activation each.

    Shapes: (N, in_channels, H, W) -> poses (N, H, W, types, 16), activations (N, H, W, types).
    """

    def __init__(self, *, in_channels: int, types: int):
        super().__init__()
        self.types = types
        self.pose = nn.Conv2d(in_channels, types * POSE, 1)
        self.act = nn.Conv2d(in_channels, types, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n, _, h, w = x.shape
        pose = self.pose(x).view(n, self.types, POSE, h, w).permute(0, 3, 4, 1, 2)  # (N, H, W, types, 16)
        return pose, saturating(torch.sigmoid, self.act(x)).permute(0, 2, 3, 1)  # (N, H, W, types)


def _vote_weights(n_in: int, n_out: int) -> nn.Parameter:
    """Transformation matrices W_ij (n_in, n_out, 4, 4), scaled so that votes M W keep M's scale."""
    return nn.Parameter(0.5 * torch.randn(n_in, n_out, 4, 4))


class ConvMatrixCaps(nn.Module):
    """Convolutional capsules: votes M_i W_ij from a K x K window, EM-routed per output position.

    Transformation matrices are shared across positions, distinct per kernel position and type.
    Each window is routed on its own: a child's assignments are normalised over the parents of one
    window, not over every window that contains it (a common simplification of the paper).

    Args:
        in_types, out_types: capsule types B -> C; kernel_size, stride: of the window.
        iterations, inverse_temperature, min_variance: of EMRouting.
    Shapes: poses (N, H, W, in_types, 16), activations (N, H, W, in_types)
        -> poses (N, H', W', out_types, 16), activations (N, H', W', out_types). `iterations` overrides EM's.
    """

    def __init__(self, *, in_types: int, out_types: int, kernel_size: int, stride: int,
                 iterations: int = 3, inverse_temperature: float = 0.01, min_variance: float = MIN_VARIANCE):
        super().__init__()
        self.in_types, self.out_types, self.kernel_size, self.stride = in_types, out_types, kernel_size, stride
        self.weight = _vote_weights(kernel_size * kernel_size * in_types, out_types)
        self.routing = EMRouting(
            out_types=out_types,
            iterations=iterations,
            inverse_temperature=inverse_temperature,
            min_variance=min_variance,
        )

    def _windows(self, grid: torch.Tensor, dim: int) -> torch.Tensor:
        """(N, H, W, T, dim) -> (N * L, kk * T, dim): the children of each of the L output positions."""
        n, h, w, t, _ = grid.shape
        cols = F.unfold(grid.permute(0, 3, 4, 1, 2).reshape(n, t * dim, h, w), self.kernel_size, stride=self.stride)
        cols = cols.view(n, t, dim, self.kernel_size**2, -1)  # (N, T, dim, kk, L)
        return cols.permute(0, 4, 3, 1, 2).reshape(-1, self.kernel_size**2 * t, dim)  # (N*L, kk*T, dim)

    def forward(
        self, pose: torch.Tensor, a: torch.Tensor, iterations: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n, h, w = pose.shape[:3]
        out_h, out_w = (h - self.kernel_size) // self.stride + 1, (w - self.kernel_size) // self.stride + 1
        m = self._windows(pose, POSE).view(n * out_h * out_w, -1, 4, 4)  # (N*L, kk*T, 4, 4)
        a_in = self._windows(a.unsqueeze(-1), 1).squeeze(-1)  # (N*L, kk*T)
        votes = torch.einsum("nirk,iokc->noirc", m, self.weight).flatten(3)  # (N*L, out, kk*T, 16)
        mu, logits = self.routing(votes, a_in, iterations=iterations)  # (N*L, out, 16), (N*L, out)
        a_out = saturating(torch.sigmoid, logits).view(n, out_h, out_w, self.out_types)
        return mu.view(n, out_h, out_w, self.out_types, POSE), a_out


class ClassMatrixCaps(nn.Module):
    """Class capsules: every capsule of the grid votes, with one W per (type, class) shared across positions.

    Coordinate addition: the scaled (row, column) of each capsule's receptive-field centre, in (0, 1),
    is added to the first two entries of the right-hand column of its vote matrix.

    Shapes: poses (N, H, W, types, 16), activations (N, H, W, types)
        -> poses (N, classes, 16), activation logits (N, classes) (activations are their sigmoid).
    """

    def __init__(
        self,
        *,
        in_types: int,
        num_classes: int,
        iterations: int = 3,
        inverse_temperature: float = 0.01,
        min_variance: float = MIN_VARIANCE,
    ):
        super().__init__()
        self.weight = _vote_weights(in_types, num_classes)
        self.routing = EMRouting(
            out_types=num_classes,
            iterations=iterations,
            inverse_temperature=inverse_temperature,
            min_variance=min_variance,
        )

    def forward(
        self, pose: torch.Tensor, a: torch.Tensor, iterations: int | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n, h, w, t, _ = pose.shape
        m = pose.view(n, h, w, t, 4, 4)
        votes = torch.einsum("nhwtrk,tokc->nohwtrc", m, self.weight)  # (N, classes, H, W, T, 4, 4)
        offset = votes.new_zeros(h, w, 1, 4, 4)
        offset[..., 0, 3] = ((torch.arange(h, dtype=votes.dtype, device=votes.device) + 0.5) / h).view(h, 1, 1)
        offset[..., 1, 3] = ((torch.arange(w, dtype=votes.dtype, device=votes.device) + 0.5) / w).view(1, w, 1)
        votes = (votes + offset).flatten(2, 4).flatten(3)  # (N, classes, H*W*T, 16)
        return self.routing(votes, a.reshape(n, h * w * t), iterations=iterations)
