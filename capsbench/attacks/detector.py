"""Reconstruction-based detection of adversarial inputs for capsule models with a decoder: Qin et al., "Detecting and
Diagnosing Adversarial Images with Class-Conditional Capsule Reconstructions" (ICLR 2020, arXiv:1907.02957). An input is
flagged when the distance between it and its reconstruction from the predicted class capsule exceeds a threshold
chosen on clean validation images for a stated false-positive rate."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from capsbench.data import as_images
from capsbench.models import Classifier
from capsbench.models.base import ModelOutput


def reconstruction_distance(out: ModelOutput, images: torch.Tensor) -> torch.Tensor:
    """Euclidean distance (B,) between each image (B, C, H, W) and the model's reconstruction of it (from the
    predicted class capsule at evaluation); differentiable, for detection-aware attacks."""
    if out.reconstructions is None:
        raise ValueError("the model returned no reconstructions: reconstruction-based detection needs a decoder")
    return (out.reconstructions - images).flatten(1).norm(dim=1)


def threshold_for(distances: torch.Tensor, fpr: float) -> float:
    """The smallest of `distances` (N,) with at most fpr * N of them strictly above it: the ceil((1 - fpr) N)-th
    smallest. Flagging `distance > threshold` then flags at most a share fpr of these clean images."""
    if not 0.0 < fpr < 1.0 or len(distances) == 0:
        raise ValueError(
            f"need a false-positive rate in (0, 1) and at least one distance, got {fpr} and {len(distances)}"
        )
    k = math.ceil((1.0 - fpr) * len(distances) - 1e-9)  # 1-based rank; the epsilon keeps 0.95 * 100 at 95
    return float(distances.sort().values[max(k, 1) - 1])


@dataclass(frozen=True)
class Detector:
    """Flags inputs whose reconstruction distance exceeds `threshold`, set on `n` clean validation images at `fpr`."""

    threshold: float
    fpr: float
    n: int

    @torch.no_grad()
    def flags(self, model: Classifier, images: torch.Tensor, *, batch_size: int) -> torch.Tensor:
        """(N,) bool on the CPU for images (N, C, H, W) in [0, 1] (or stored uint8); the model as given (eval mode)."""
        return distances(model, images, batch_size=batch_size) > self.threshold


@torch.no_grad()
def distances(model: Classifier, images: torch.Tensor, *, batch_size: int) -> torch.Tensor:
    """Reconstruction distances (N,) on the CPU, batch by batch on the model's device."""
    device = next(model.parameters()).device
    out = [
        reconstruction_distance(model(x := as_images(images[i : i + batch_size], device)), x).cpu()
        for i in range(0, len(images), batch_size)
    ]
    return torch.cat(out) if out else torch.empty(0)


def fit_detector(model: Classifier, clean_images: torch.Tensor, *, fpr: float, batch_size: int) -> Detector:
    """The detector whose threshold flags at most a share `fpr` of `clean_images` (held out from the test set)."""
    return Detector(threshold_for(distances(model, clean_images, batch_size=batch_size), fpr), fpr, len(clean_images))
