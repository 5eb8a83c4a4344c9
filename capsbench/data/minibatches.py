"""Minibatches from in-memory uint8 tensors (host memory, or already on the device), as float [0, 1] on the device."""

from __future__ import annotations

from collections.abc import Iterator

import torch


def batches(
    x: torch.Tensor,
    y: torch.Tensor,
    batch_size: int,
    *,
    device: torch.device | str = "cpu",
    shuffle_generator: torch.Generator | None = None,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield (images float (B, C, H, W) in [0, 1], labels) batches; shuffled when a generator is given."""
    n = len(x)
    if shuffle_generator is None:
        order = torch.arange(n, device=x.device)
    else:  # drawn where the generator lives: a CUDA generator and split on the GPU need no host round trip
        order = torch.randperm(n, generator=shuffle_generator, device=shuffle_generator.device).to(x.device)
    for start in range(0, n, batch_size):
        idx = order[start : start + batch_size]
        yield as_images(x[idx], device), y[idx].to(device, non_blocking=True)


def as_images(x: torch.Tensor, device: torch.device | str = "cpu") -> torch.Tensor:
    """Stored images (uint8 0..255 or float) -> float (B, C, H, W) in [0, 1] on `device`."""
    images = x.to(device, non_blocking=True)
    return images.float().div_(255.0) if images.dtype == torch.uint8 else images.float()
