"""Training protocols: how raw training images become model inputs and targets, and how held-out images are shown.

A suite picks its protocol (Sabour's shifted MNIST by default; a 40x40 canvas for affNIST, overlapping
pairs for MultiMNIST); the protocol's identity is part of the checkpoint's cache key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.nn import functional as F

from capsbench.data import DATASETS, DatasetSpec, Splits, random_shift
from capsbench.data.affine_augment import AugmentRanges, random_affine_on_canvas
from capsbench.data.augment import random_integers
from capsbench.data.canvas import centre_on_canvas, random_place_on_canvas
from capsbench.models import Classifier
from capsbench.train.evaluation import accuracy


@dataclass
class Batch:
    """Model inputs (B, C, H, W) in [0, 1] and targets: (B,) class indices or (B, C) multi-hot.

    Inputs composed of K objects (MultiMNIST: K = 2 digits) may carry them unmerged, for per-object
    reconstruction: components (B, K, C, H, W) and their classes component_labels (B, K).
    """

    inputs: torch.Tensor
    targets: torch.Tensor
    components: torch.Tensor | None = None
    component_labels: torch.Tensor | None = None


def crop(images: torch.Tensor, top: torch.Tensor, left: torch.Tensor, size: int) -> torch.Tensor:
    """(B, C, H, W) -> (B, C, size, size): from image i the window whose top-left pixel is (top[i], left[i])."""
    span = torch.arange(size, device=images.device)
    rows = (top.to(images.device).view(-1, 1) + span).view(-1, size, 1)  # (B, size, 1)
    cols = (left.to(images.device).view(-1, 1) + span).view(-1, 1, size)  # (B, 1, size)
    batch = torch.arange(len(images), device=images.device).view(-1, 1, 1)
    return images.permute(0, 2, 3, 1)[batch, rows, cols].permute(0, 3, 1, 2)  # (B, C, size, size)


class TrainingProtocol:
    """Sabour et al.'s MNIST protocol: random translations of up to `max_shift` pixels, single labels."""

    name = "shift"
    augments_on_device = True  # train_batch accepts a generator on the images' device (CUDA: no host round trip)

    def __init__(self, *, max_shift: int = 2) -> None:
        self.max_shift = max_shift

    def input_size(self, image_size: int) -> int:
        """Side of the images the model sees, given the dataset's."""
        return image_size

    def train_batch(self, images: torch.Tensor, labels: torch.Tensor, gen: torch.Generator) -> Batch:
        return Batch(random_shift(images, self.max_shift, gen), labels)

    def eval_inputs(self, images: torch.Tensor) -> torch.Tensor:
        """How validation and test images are presented (unchanged here)."""
        return images

    def validation_score(self, model: Classifier, splits: Splits, *, batch_size: int, device: str) -> float:
        """The model-selection score on the validation split, in [0, 1], higher is better: top-1 accuracy here."""
        return accuracy(
            model, splits.val_x, splits.val_y, batch_size=batch_size, device=device, transform=self.eval_inputs
        )

    def identity(self) -> dict[str, Any]:
        return {"protocol": self.name, "max_shift": self.max_shift}

    def min_validation_score(self, spec: DatasetSpec) -> float:
        """Validation score (%) below which a trained model is undertrained: never compared, flagged in tables."""
        return spec.min_val_accuracy


class CanvasProtocol(TrainingProtocol):
    """Sabour et al.'s expanded MNIST for affNIST ("Dynamic Routing Between Capsules", arXiv:1710.09829, sec. 5.2).

    Training digits are placed at a uniform random integer offset on a black `canvas` x `canvas` background
    (no other augmentation); validation and test digits are centred on it. Shapes: (B, C, h, h) -> (B, C, canvas,
    canvas).
    """

    name = "canvas"

    def __init__(self, *, canvas: int = 40) -> None:
        super().__init__(max_shift=0)
        self.canvas = canvas

    def input_size(self, image_size: int) -> int:
        return self.canvas

    def train_batch(self, images: torch.Tensor, labels: torch.Tensor, gen: torch.Generator) -> Batch:
        return Batch(random_place_on_canvas(images, self.canvas, gen), labels)

    def eval_inputs(self, images: torch.Tensor) -> torch.Tensor:
        return centre_on_canvas(images, self.canvas)

    def identity(self) -> dict[str, Any]:
        return {"protocol": self.name, "canvas": self.canvas}


class AffineCanvasProtocol(CanvasProtocol):
    """The canvas protocol with random affine augmentation (train.augment=affine): each training digit is centred on
    the canvas, rotated, sheared and scaled by uniform draws from `ranges` about the canvas centre, then placed at a
    uniform integer offset that keeps all its ink on the canvas; validation and test digits are centred, unchanged.
    Shapes: (B, C, h, h) -> (B, C, canvas, canvas)."""

    name = "affine_canvas"
    augments_on_device = False  # transforms and offsets are drawn with a CPU generator (capsbench.data.affine_augment)

    def __init__(self, *, canvas: int = 40, ranges: AugmentRanges) -> None:
        super().__init__(canvas=canvas)
        self.ranges = ranges

    def train_batch(self, images: torch.Tensor, labels: torch.Tensor, gen: torch.Generator) -> Batch:
        return Batch(random_affine_on_canvas(images, self.canvas, self.ranges, gen)[0], labels)

    def identity(self) -> dict[str, Any]:
        r = self.ranges
        return {
            **super().identity(),
            "protocol": self.name,
            "max_rotation_deg": r.max_rotation_deg,
            "max_shear": r.max_shear,
            "min_scale": r.min_scale,
            "max_scale": r.max_scale,
        }


class RandomCropProtocol(TrainingProtocol):
    """Random `size` x `size` crops for training, the centre crop for validation and test (Hinton et al. 2018 on
    smallNORB: 32x32 crops of 48x48 images). Single labels."""

    name = "crop"

    def __init__(self, *, size: int) -> None:
        super().__init__(max_shift=0)
        self.size = size

    def input_size(self, image_size: int) -> int:
        if image_size < self.size:
            raise ValueError(f"crop size {self.size} is larger than the images ({image_size}x{image_size})")
        return self.size

    def _crop(self, images: torch.Tensor, top: torch.Tensor, left: torch.Tensor) -> torch.Tensor:
        return crop(images, top, left, self.size)

    def train_batch(self, images: torch.Tensor, labels: torch.Tensor, gen: torch.Generator) -> Batch:
        top, left = random_integers(0, images.shape[-1] - self.size + 1, (2, len(images)), gen, images.device)
        return Batch(self._crop(images, top, left), labels)

    def eval_inputs(self, images: torch.Tensor) -> torch.Tensor:
        offset = torch.full((len(images),), (images.shape[-1] - self.size) // 2)
        return self._crop(images, offset, offset)

    def identity(self) -> dict[str, Any]:
        return {"protocol": self.name, "size": self.size}


class PadCropProtocol(TrainingProtocol):
    """The standard CIFAR augmentation (He et al., arXiv:1512.03385, sec. 4.2): each training image is zero-padded by
    `pad` pixels per side and a random window of its own size is cropped, then mirrored left-right with probability
    1/2 when `flip`; validation and test images are shown unchanged. Shapes: (B, C, H, W) -> (B, C, H, W)."""

    name = "pad_crop"

    def __init__(self, *, pad: int = 4, flip: bool = True) -> None:
        super().__init__(max_shift=0)
        self.pad, self.flip = pad, flip

    def train_batch(self, images: torch.Tensor, labels: torch.Tensor, gen: torch.Generator) -> Batch:
        top, left = random_integers(0, 2 * self.pad + 1, (2, len(images)), gen, images.device)  # on gen's device
        out = crop(F.pad(images, (self.pad,) * 4), top, left, images.shape[-1])  # (B, C, H, W)
        if self.flip:
            mirror = (
                (torch.rand(len(images), generator=gen, device=gen.device) < 0.5).to(images.device).view(-1, 1, 1, 1)
            )
            out = torch.where(mirror, out.flip(-1), out)
        return Batch(out, labels)

    def identity(self) -> dict[str, Any]:
        return {"protocol": self.name, "pad": self.pad, "flip": self.flip}


def dataset_protocol(dataset: str, max_shift: int) -> TrainingProtocol:
    """The default protocol for a dataset, from its registration: random crops (train_crop), padded random crops and
    flips (train_pad, train_flip: CIFAR-10 and SVHN), else Sabour's random shifts of up to max_shift pixels."""
    spec = DATASETS.get(dataset)
    if spec.train_crop is not None:
        return RandomCropProtocol(size=spec.train_crop)
    if spec.train_pad:
        return PadCropProtocol(pad=spec.train_pad, flip=spec.train_flip)
    return TrainingProtocol(max_shift=max_shift)
