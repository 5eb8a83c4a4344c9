"""Digits on a larger black canvas: centred (evaluation) or at a random integer offset (expanded-MNIST training)."""

from __future__ import annotations

import torch
from torch.nn import functional as F


def _margin(images: torch.Tensor, size: int) -> int:
    h, w = images.shape[-2:]
    if h != w or size < h:
        raise ValueError(f"canvas of side {size} cannot hold {h}x{w} images (expected square images no larger than it)")
    return size - h


def centre_on_canvas(images: torch.Tensor, size: int) -> torch.Tensor:
    """Pad (B, C, h, h) images to (B, C, size, size) with the image in the middle (the extra pixel, if odd, at bottom/right)."""
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
    offsets = torch.randint(0, margin + 1, (2, b, 1, 1), generator=generator).to(images.device)
    canvas_rows = torch.arange(size, device=images.device).view(1, size, 1) - offsets[0]  # (B, size, 1) row in the image
    canvas_cols = torch.arange(size, device=images.device).view(1, 1, size) - offsets[1]  # (B, 1, size)
    inside = (canvas_rows >= 0) & (canvas_rows < h) & (canvas_cols >= 0) & (canvas_cols < w)  # (B, size, size)
    index = (canvas_rows.clamp(0, h - 1) * w + canvas_cols.clamp(0, w - 1)).view(b, 1, size * size)
    placed = images.flatten(2).gather(2, index.expand(b, c, size * size)).view(b, c, size, size)
    return placed * inside.unsqueeze(1).to(placed.dtype)
