"""Inference helpers shared by suites and training: predictions and accuracy on in-memory splits."""

from __future__ import annotations

from collections.abc import Callable

import torch

from capsbench.data import batches
from capsbench.models import Classifier

Transform = Callable[[torch.Tensor], torch.Tensor]


@torch.no_grad()
def predict(
    model: Classifier,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    batch_size: int,
    device: str,
    transform: Transform | None = None,
) -> torch.Tensor:
    """Predicted classes (N,) = argmax of the model's class scores, in eval mode; `transform` maps each batch first."""
    was_training = model.training
    model.eval()
    preds = [
        model(transform(images) if transform else images).scores.argmax(dim=1).cpu()
        for images, _ in batches(x, y, batch_size, device=device)
    ]
    model.train(was_training)
    return torch.cat(preds) if preds else torch.empty(0, dtype=torch.long)


def correct(
    model: Classifier,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    batch_size: int,
    device: str,
    transform: Transform | None = None,
) -> torch.Tensor:
    """(N,) bool: whether the model's top-1 decision on each image is its label."""
    if len(y) == 0:
        raise ValueError("accuracy of an empty split is undefined")
    # predictions come back on the CPU; labels may live on the device (training keeps its splits there)
    return predict(model, x, y, batch_size=batch_size, device=device, transform=transform) == y.cpu()


def accuracy(
    model: Classifier,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    batch_size: int,
    device: str,
    transform: Transform | None = None,
) -> float:
    """Top-1 accuracy in [0, 1]."""
    return correct(model, x, y, batch_size=batch_size, device=device, transform=transform).float().mean().item()
