"""Batched training augmentations that run on the model's device."""

from __future__ import annotations

import torch
from torch.nn import functional as F


def random_integers(
    low: int, high: int, shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device | str
) -> torch.Tensor:
    """Uniform integers in [low, high), drawn on the generator's own device (CPU without one) and returned on `device`.

    A CUDA generator draws on the GPU, so augmenting a batch that lives there needs no host round trip; a CPU
    generator draws the same numbers as it always did.
    """
    where = generator.device if generator is not None else torch.device("cpu")
    return torch.randint(low, high, shape, generator=generator, device=where).to(device)


def random_shift(x: torch.Tensor, max_shift: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Shift each image by an independent integer offset in [-max_shift, max_shift] per axis, zero fill.

    Sabour et al.'s only MNIST augmentation (max_shift=2). Shapes: (B, C, H, W) -> (B, C, H, W).
    """
    if max_shift <= 0:
        return x
    b, c, h, w = x.shape
    padded = F.pad(x, (max_shift,) * 4).flatten(2)  # (B, C, (H + 2s) * (W + 2s))
    offsets = random_integers(0, 2 * max_shift + 1, (2, b, 1, 1), generator, x.device)
    rows = offsets[0] + torch.arange(h, device=x.device).view(1, h, 1)  # (B, H, 1) rows in the padded image
    cols = offsets[1] + torch.arange(w, device=x.device).view(1, 1, w)  # (B, 1, W)
    index = (rows * (w + 2 * max_shift) + cols).view(b, 1, h * w).expand(b, c, h * w)
    return padded.gather(2, index).view(b, c, h, w)
