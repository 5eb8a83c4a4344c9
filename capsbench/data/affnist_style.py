"""A generated affNIST-style test set (MNIST test digits under random affine transforms in affNIST's ranges),
deterministic across machines and cached on disk; used when the real affNIST files are absent.
"""

from __future__ import annotations

import hashlib
import logging
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from capsbench.data.canvas import affine_matrix, centre_on_canvas, warp
from capsbench.util.atomic import save_torch
from capsbench.util.hashing import content_key

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AffineRanges:
    """Uniform ranges of the generated set's transforms (defaults: affNIST's documented ranges)."""

    max_rotation_deg: float = 20.0
    max_shear: float = 0.2
    min_scale: float = 0.8
    max_scale: float = 1.2
    canvas: int = 40
    seed: int = 0


@dataclass
class AffineSet:
    """Transformed images (N, 1, canvas, canvas) uint8, labels (N,), per-image parameters (N, 6) and the content hash.

    params columns: rotation_deg, shear, scale_x, scale_y, shift_x, shift_y (pixels).
    """

    images: torch.Tensor
    labels: torch.Tensor
    params: torch.Tensor
    sha256: str


def content_hash(images: torch.Tensor, labels: torch.Tensor) -> str:
    """sha256 over the raw uint8 image bytes and int64 label bytes."""
    h = hashlib.sha256(images.contiguous().numpy().tobytes())
    h.update(labels.to(torch.int64).contiguous().numpy().tobytes())
    return h.hexdigest()


def _shift_range(lo: float, hi: float, reach: float, canvas: int) -> tuple[int, int]:
    """Integer shifts t with lo + t - reach >= -1 and hi + t + reach <= canvas: bilinear ink stays on the canvas."""
    return math.ceil(-1 - lo + reach), math.floor(canvas - hi - reach)


def generate(images: torch.Tensor, labels: torch.Tensor, ranges: AffineRanges) -> AffineSet:
    """Transform (N, 1, h, h) uint8 digits once each into (N, 1, canvas, canvas); deterministic given inputs and ranges.

    Ranges from the affNIST page (Tieleman, https://www.cs.toronto.edu/~tijmen/affNIST/): rotation up to 20 degrees
    either way, shear up to 0.2 either way, horizontal and vertical scale independently in [0.8, 1.2], each uniform;
    then a uniform random integer placement on the 40x40 canvas among those that cut no ink off. Parameters come from
    numpy's PCG64 (platform-independent) and are rounded before use; the warp is float64 elementwise arithmetic.
    """
    rng = np.random.Generator(np.random.PCG64(ranges.seed))
    n, size = len(images), ranges.canvas
    draws = rng.random((n, 6))  # (N, 6) uniforms in [0, 1): rotation, shear, scale_x, scale_y, shift_x, shift_y
    rot = np.round((2 * draws[:, 0] - 1) * ranges.max_rotation_deg, 6)
    shear = np.round((2 * draws[:, 1] - 1) * ranges.max_shear, 6)
    scales = np.round(ranges.min_scale + draws[:, 2:4] * (ranges.max_scale - ranges.min_scale), 6)
    canvas = centre_on_canvas(images, size)  # (N, 1, S, S)
    centre = (size - 1) / 2.0
    matrices = torch.stack([
        affine_matrix(rotation_deg=float(r), shear=float(s), scale_x=float(sx), scale_y=float(sy))
        for r, s, (sx, sy) in zip(rot, shear, scales)
    ])  # (N, 2, 2)
    shifts, squeezed = torch.zeros(n, 2, dtype=torch.float64), 0
    ink = canvas.flatten(1) > 0  # (N, S * S)
    grid = torch.arange(size, dtype=torch.float64) - centre
    rx, ry = grid.repeat(size).unsqueeze(0), grid.repeat_interleave(size).unsqueeze(0)  # (1, S * S) pixel x, y
    for axis in range(2):
        a, b = matrices[:, axis, 0:1], matrices[:, axis, 1:2]  # (N, 1) each
        moved = a * rx + b * ry + centre  # (N, S * S) where every pixel lands on this axis, before the shift
        lo_ink = torch.where(ink, moved, torch.inf).amin(dim=1)
        hi_ink = torch.where(ink, moved, -torch.inf).amax(dim=1)
        reach = a.abs().squeeze(1) + b.abs().squeeze(1)  # (N,) how far one source pixel's bilinear footprint extends
        for i in range(n):
            lo, hi = _shift_range(lo_ink[i].item(), hi_ink[i].item(), reach[i].item(), size)
            if lo > hi:  # the transformed digit is wider than the canvas: centre it (some ink is lost)
                lo = hi = round(centre - (lo_ink[i].item() + hi_ink[i].item()) / 2)
                squeezed += 1
            shifts[i, axis] = lo + math.floor(draws[i, 4 + axis] * (hi - lo + 1))
    if squeezed:
        log.warning("affNIST-style set: %d axis placement(s) could not keep all ink on the canvas", squeezed)
    out = torch.cat(
        [warp(canvas[i : i + 1000], matrices[i : i + 1000], shifts[i : i + 1000]) for i in range(0, n, 1000)]
    )
    params = torch.from_numpy(np.stack([rot, shear, scales[:, 0], scales[:, 1]], axis=1))
    params = torch.cat([params, shifts], dim=1)  # (N, 6): rotation_deg, shear, scale_x, scale_y, shift_x, shift_y
    return AffineSet(out, labels.clone(), params, content_hash(out, labels))


def cached_affnist_style(
    images: torch.Tensor, labels: torch.Tensor, ranges: AffineRanges, cache_dir: Path
) -> AffineSet:
    """The generated set from <cache_dir>/affnist_style/<key>.pt, generating and saving it on first use.

    The key covers the ranges, the seed and the source digits' hash, so a different subset or seed is a new file.
    """
    key = content_key({"ranges": asdict(ranges), "source": content_hash(images, labels), "version": 1})
    path = Path(cache_dir) / "affnist_style" / f"{key}.pt"
    if path.exists():
        stored = torch.load(path, map_location="cpu", weights_only=True)
        cached = AffineSet(stored["images"], stored["labels"], stored["params"], stored["sha256"])
        if content_hash(cached.images, cached.labels) == cached.sha256:
            return cached
        log.warning("affNIST-style cache %s does not match its recorded hash; regenerating", path)
    made = generate(images, labels, ranges)
    save_torch({"images": made.images, "labels": made.labels, "params": made.params, "sha256": made.sha256}, path)
    log.info("affNIST-style set: %d images, sha256 %s, cached at %s", len(made.labels), made.sha256[:16], path)
    return made
