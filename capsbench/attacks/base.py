"""What every attack is: a name, whether it needs gradients, what it attacks, and `run`, which returns for every
image and eps whether the model's own decision was flipped (and the adversarial images that flipped it)."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from capsbench.models import Classifier

REJECTED = -1  # a defended model's decision on an input its detector flags: never counts as the attack's success


@dataclass(frozen=True)
class AttackSettings:
    """How attacks are run. PGD's step size is step_ratio * eps / steps (Madry et al.'s 2.5 eps / k rule); APGD sets
    its own (2 eps, halved at checkpoints).

    early_exit: stop attacking an image (row) as soon as one iterate is misclassified. An image counts as broken
    when any iterate is misclassified, so this changes only the cost, never a result.
    batch_size: rows (image x eps pairs) attacked together.
    progress: called as progress(done, total, left) while an attack runs, after every step of a batch of rows (PGD
    family) or every batch of images (torchattacks): `done` of `total` row-steps of this run, `left` rows still
    attacked. It only reports; results never depend on it.
    """

    steps: int
    step_ratio: float
    restarts: int
    square_queries: int
    num_classes: int
    seed: int
    batch_size: int = 500
    early_exit: bool = True
    detection_threshold: float | None = None  # the reconstruction detector that pgd_detect_aware evades
    detection_weight: float = 1.0  # its penalty: weight x (distance / threshold - 0.9), where positive
    targets: int | None = None  # classes a multi-targeted pass tries, likeliest first; None: every other class
    apgd_steps: int = 100  # iterations of each APGD pass
    apgd_restarts: int = 1  # random starts of the untargeted APGD pass
    apgd_targets: int | None = None  # classes APGD-T tries, likeliest first; None: every other class
    precision: str = "fp32"  # or bf16: gradient attacks under bf16 autocast, each image judged by the fp32 model
    progress: Callable[[int, int, int], None] | None = field(default=None, compare=False, repr=False)


@dataclass
class AttackResult:
    """Per eps: broken (N,) bool — the model's decision on some adversarial image differs from the label — and the
    adversarial images (N, C, H, W): the first that broke the image, else the attack's last iterate."""

    broken: dict[float, torch.Tensor]
    adversarial: dict[float, torch.Tensor]


class Attack:
    """Base class. Subclasses set the class attributes and write run(); budgets come from AttackSettings."""

    name: ClassVar[str]  # as registered in capsbench.attacks.CATALOG, which also says whether it is white-box
    attacks: ClassVar[str]  # what the loss and gradient are computed on, for docs and tables

    def applies_to(self, model: Classifier, sample: torch.Tensor) -> str | None:
        """None when the attack is defined for `model`, else the reason it is not (recorded, never raised).
        `sample` is one input batch of the right shape, for attacks that must probe the model."""
        return None

    def budget(self, settings: AttackSettings) -> str:
        """Steps, restarts, step size or queries, in words."""
        raise NotImplementedError

    def run(self, model: Classifier, images: torch.Tensor, labels: torch.Tensor, ids: torch.Tensor,
            eps_values: list[float], settings: AttackSettings) -> AttackResult:
        """Attack `images` (N, C, H, W) in [0, 1] on the model's device, every one classified correctly clean, at each
        eps. `ids` (N,) are the images' indices in the test set: random starts are drawn per id, so that a result never
        depends on which other images share a batch."""
        raise NotImplementedError


@torch.no_grad()
def decisions(model: Classifier, images: torch.Tensor) -> torch.Tensor:
    """The classifier's decision (B,): argmax of its class scores, the quantity every attack must flip."""
    return model(images).scores.argmax(dim=1)


def start_noise(
    ids: torch.Tensor, shape: tuple[int, ...], *, seed: int, stream: str, device: torch.device
) -> torch.Tensor:
    """Uniform noise in [-1, 1] of `shape` per image id, fixed by (seed, stream, id) alone: (N, *shape)."""
    out = torch.empty(len(ids), *shape)
    for row, image_id in enumerate(ids.tolist()):
        digest = hashlib.blake2b(f"{seed}/{stream}/{image_id}".encode(), digest_size=8).digest()
        gen = torch.Generator().manual_seed(int.from_bytes(digest, "little") & (2**63 - 1))
        out[row] = torch.rand(shape, generator=gen).mul_(2.0).sub_(1.0)
    return out.to(device)


UNUSED_HEADS = ("decoder",)  # submodules no attack's loss or decision reads (the reconstruction decoder)


@contextlib.contextmanager
def without_unused_heads(model: Classifier) -> Iterator[None]:
    """While the block runs, the model's reconstruction decoder is detached (its forward returns no reconstruction):
    no attack reads it, so attack forwards skip its cost and the decisions are unchanged. Restored afterwards."""
    held = {name: getattr(model, name) for name in UNUSED_HEADS if getattr(model, name, None) is not None}
    for name in held:
        setattr(model, name, None)
    try:
        yield
    finally:
        for name, module in held.items():
            setattr(model, name, module)
