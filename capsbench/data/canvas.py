"""Digits on a black canvas: centred, at a random offset (expanded-MNIST training), or under an affine warp about
its centre. Warps use float64 elementwise ops only (bit-reproducible) and the identity warp is exact.
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from capsbench.data.augment import random_integers


def _margin(images: torch.Tensor, size: int) -> int:
    h, w = images.shape[-2:]
    if h != w or size < h:
        raise ValueError(f"canvas of side {size} cannot hold {h}x{w} images (expected square images no larger than it)")
    return size - h


def centre_on_canvas(images: torch.Tensor, size: int) -> torch.Tensor:
    """Pad (B, C, h, h) images to (B, C, size, size) with the image in the middle (the extra pixel, if odd, at
    bottom/right)."""
    margin = _margin(images, size)
    before = margin // 2
    return F.pad(images, (before, margin - before, before, margin - before))


def random_place_on_canvas(images: torch.Tensor, size: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Each (h, h) image at an independent uniform integer offset in [0, size - h] per axis, so no pixel is cut off.

    Sabour et al.'s expanded-MNIST training set ("each example is an MNIST digit placed randomly on a
    black background of 40x40 pixels"). Shapes: (B, C, h, h) -> (B, C, size, size).
    """
    margin = _margin(images, size)
    b, c, h, w = images.shape
    offsets = random_integers(0, margin + 1, (2, b, 1, 1), generator, images.device)
    canvas_rows = (
        torch.arange(size, device=images.device).view(1, size, 1) - offsets[0]
    )  # (B, size, 1) row in the image
    canvas_cols = torch.arange(size, device=images.device).view(1, 1, size) - offsets[1]  # (B, 1, size)
    inside = (canvas_rows >= 0) & (canvas_rows < h) & (canvas_cols >= 0) & (canvas_cols < w)  # (B, size, size)
    index = (canvas_rows.clamp(0, h - 1) * w + canvas_cols.clamp(0, w - 1)).view(b, 1, size * size)
    placed = images.flatten(2).gather(2, index.expand(b, c, size * size)).view(b, c, size, size)
    return placed * inside.unsqueeze(1).to(placed.dtype)


def affine_matrix(
    *, rotation_deg: float = 0.0, shear: float = 0.0, scale_x: float = 1.0, scale_y: float = 1.0
) -> torch.Tensor:
    """A = R(rotation) @ H(shear) @ S(scale_x, scale_y), float64 (2, 2), acting on (x, y) column vectors.

    Scaling applies first, then the horizontal shear x' = x + shear * y, then the rotation; positive angles
    turn the digit counter-clockwise as displayed (y down). Entries are rounded to 1e-12 so that last-bit
    differences between platforms' sin/cos do not change the warped pixels.
    """
    theta = math.radians(rotation_deg)
    c, s = math.cos(theta), math.sin(theta)
    # [[c, s], [-s, c]] @ [[1, shear], [0, 1]] @ [[scale_x, 0], [0, scale_y]], written out (no BLAS, no FMA)
    entries = [[c * scale_x, (c * shear + s) * scale_y], [-s * scale_x, (c - s * shear) * scale_y]]
    return torch.round(torch.tensor(entries, dtype=torch.float64), decimals=12)


def warp(images: torch.Tensor, matrix: torch.Tensor, shift: torch.Tensor | None = None) -> torch.Tensor:
    """Move each image's content by q = A (p - c) + c + shift, c the canvas centre; bilinear, zero outside.

    Args:
        images: (N, C, S, S) uint8 canvases.
        matrix: (2, 2) or (N, 2, 2) affine matrices A (float64).
        shift: (2,) or (N, 2) translations (dx, dy) in pixels; None = no translation.
    Returns (N, C, S, S) uint8, rounded to nearest (ties to even).
    """
    n, ch, size, _ = images.shape
    a = matrix.to(torch.float64).expand(n, 2, 2)
    t = (torch.zeros(2, dtype=torch.float64) if shift is None else shift.to(torch.float64)).expand(n, 2)
    det = a[:, 0, 0] * a[:, 1, 1] - a[:, 0, 1] * a[:, 1, 0]
    if (det.abs() < 1e-9).any():
        raise ValueError("warp needs invertible matrices (a scale or shear made the determinant 0)")
    inv = torch.stack([a[:, 1, 1], -a[:, 0, 1], -a[:, 1, 0], a[:, 0, 0]], dim=1) / det[:, None]  # (N, 4) row-major A^-1
    centre = (size - 1) / 2.0
    grid = torch.arange(size, dtype=torch.float64)
    qx = grid.view(1, 1, size) - centre - t[:, 0].view(n, 1, 1)  # (N, 1, S) output column relative to the centre
    qy = grid.view(1, size, 1) - centre - t[:, 1].view(n, 1, 1)  # (N, S, 1)
    px = inv[:, 0].view(n, 1, 1) * qx + inv[:, 1].view(n, 1, 1) * qy + centre  # (N, S, S) source x
    py = inv[:, 2].view(n, 1, 1) * qx + inv[:, 3].view(n, 1, 1) * qy + centre  # (N, S, S) source y
    x0, y0 = torch.floor(px), torch.floor(py)
    fx, fy = px - x0, py - y0
    src = images.to(torch.float64).flatten(2)  # (N, C, S * S)
    out = torch.zeros(n, ch, size * size, dtype=torch.float64)
    for dy, wy in ((0, 1.0 - fy), (1, fy)):
        for dx, wx in ((0, 1.0 - fx), (1, fx)):
            xs, ys = x0 + dx, y0 + dy
            inside = (xs >= 0) & (xs < size) & (ys >= 0) & (ys < size)  # (N, S, S)
            index = (ys.clamp(0, size - 1) * size + xs.clamp(0, size - 1)).long().view(n, 1, size * size)
            weight = (wx * wy * inside).view(n, 1, size * size)
            out += weight * src.gather(2, index.expand(n, ch, size * size))
    return torch.round(out).clamp_(0, 255).to(torch.uint8).view(n, ch, size, size)
