"""What an attack declares (its label, its place in the tables, its settings as keyword arguments of its constructor,
its cost per row) and what every attack shares: the engine's settings, a pass over rows, the result, the decision an
attack must flip, per-image random starts, and detaching the heads no attack reads."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import torch

from capsbench.attacks.losses import TARGETED
from capsbench.models import Classifier

if TYPE_CHECKING:
    from capsbench.attacks.objectives import Objective
    from capsbench.attacks.step_rules import StepRule

@dataclass(frozen=True)
class EngineSettings:
    """What every attack of a run shares.

    num_classes: the dataset's classes. seed: fixes the random starts (per image id) and the query attacks' draws.
    norm: the threat model, "linf" (eps-boxes) or "l2" (eps-balls in L2), both on [0, 1] pixels.
    batch_size: rows (image x eps x pass) in the pool at once. early_exit: a row leaves as soon as one iterate is
    misclassified (an image counts as broken when any iterate is, so this changes the cost only). precision: "fp32",
    or "bf16" (forward and backward under bf16 autocast, every break confirmed by the fp32 model). compact_every:
    iterates between the pool's compactions, the engine's only reads of the device (finished rows leave, new rows
    enter); 1 on a CPU, where a read is free and a finished row must not cost another step. speculate: rows enter
    before the rows they depend on have finished, when the pool has room (a GPU's width for fewer iterates; the
    results are the same, the work larger). progress: called as progress(done, total, rows_left) at each compaction,
    in row-steps declared (steps + 1 per row; skipped steps count as done); by a minimum-norm attack after each batch,
    in images. It only reports.
    """

    num_classes: int
    seed: int = 0
    norm: str = "linf"  # the threat model: "linf" or "l2"
    batch_size: int = 500
    early_exit: bool = True
    precision: str = "fp32"
    compact_every: int = 1
    speculate: bool = False
    progress: Callable[[int, int, int], None] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Pass:
    """One run of rows: what it differentiates, the loss it ascends (capsbench.attacks.losses; a targeted one towards
    the class ranked `target` among the others, 1 = runner-up), how a row moves (its step rule), how many steps, and
    its random start (`restart`; none for random_start=False)."""

    objective: Objective
    loss: str
    rule: StepRule
    steps: int
    restart: int = 0
    target: int = 0
    random_start: bool = True
    tag: str = ""  # sets a pass's random numbers apart from the gradient attacks' (which share theirs)

    @property
    def stream(self) -> str:
        """The random-start stream: every gradient attack starts from the same points for a loss and restart."""
        return f"{self.tag}{self.loss}{self.target if self.loss in TARGETED else ''}/{self.restart}"


@dataclass
class AttackResult:
    """Per eps: broken (N,) bool — the model's decision on some adversarial image differs from the label — and the
    adversarial images (N, C, H, W) where they were kept: the first that broke the image, else the last iterate."""

    broken: dict[float, torch.Tensor]
    adversarial: dict[float, torch.Tensor]


class Attack:
    """An attack's declaration. Class attributes, read from the source without importing torch: LABEL (its name in
    tables), ORDER (its place in them), WHITE_BOX (whether it reads gradients), DEFENDED (whether it attacks the model
    with its reconstruction detector: run by params.detection_fpr, never listed), ARGUMENT_RANGES (the valid values of
    its constructor's keyword arguments, which are its settings: params.attack_args.<name>.<argument>)."""

    name: ClassVar[str]  # as registered in capsbench.attacks.CATALOG
    attacks: ClassVar[str]  # what the loss and gradient are computed on, for docs and tables
    LABEL: ClassVar[str]
    ORDER: ClassVar[int]
    WHITE_BOX: ClassVar[bool] = True
    DEFENDED: ClassVar[bool] = False
    ARGUMENT_RANGES: ClassVar[dict[str, object]] = {}
    NORMS: ClassVar[tuple[str, ...]] = ("linf",)  # the threat models it has a form for

    def for_norm(self, norm: str) -> Attack:
        """The attack's form in threat model `norm` (itself, where one class serves every norm)."""
        if norm not in self.NORMS:
            raise ValueError(f"{self.name} has no {norm} form (it has: {', '.join(self.NORMS)})")
        return self

    def applies_to(self, model: Classifier, sample: torch.Tensor) -> str | None:
        """None when the attack is defined for `model`, else the reason it is not (recorded, never raised).
        `sample` is one input batch of the right shape, for attacks that must probe the model."""
        return None

    def budget(self, num_classes: int) -> str:
        """Steps, restarts, step size or queries, in words."""
        raise NotImplementedError

    def cost(self, eps: float, num_classes: int, norm: str = "linf") -> float:
        """Image passes (a forward or a backward pass of one image) of one image at `eps`, at most: the declared work
        that prices a unit and weighs its progress."""
        raise NotImplementedError


class RowAttack(Attack):
    """An iterative gradient attack: passes of rows (image x eps) that the row engine runs, each pass on the rows the
    earlier ones left robust."""

    def passes(self, eps: float, num_classes: int, norm: str = "linf") -> list[Pass]:
        """The passes at `eps` in threat model `norm`, in order."""
        raise NotImplementedError

    def cost(self, eps: float, num_classes: int, norm: str = "linf") -> float:
        """Per pass a forward pass per iterate and, where the rule reads gradients, a backward pass."""
        return float(sum((2 if p.rule.needs_gradient else 1) * (p.steps + 1)
                         for p in self.passes(eps, num_classes, norm)))


class QueryAttack(Attack):
    """An attack that runs its own loop (taken from a library as it is): it attacks whole images at each eps."""

    def run(self, model: Classifier, images: torch.Tensor, labels: torch.Tensor, ids: torch.Tensor,
            eps_values: list[float], settings: EngineSettings) -> AttackResult:
        """Attack `images` (N, C, H, W) in [0, 1] on the model's device, each classified correctly clean, at each eps;
        `ids` (N,) are their indices in the test set."""
        raise NotImplementedError


class MinimalAttack(Attack):
    """A minimum-norm attack: for each image the smallest perturbation it finds that flips the model's decision, in
    a threat model (L-inf or L2 on [0, 1] pixels), rather than whether one of radius eps exists."""

    MINIMAL: ClassVar[bool] = True
    BATCH: ClassVar[int] = 250  # images per library call, whatever the engine's pool: a result never depends on it

    def batches(self, n: int, settings: EngineSettings) -> Iterator[slice]:
        """The BATCH-image slices of n images, in order; after each, settings.progress(images done, n, images left)."""
        for start in range(0, n, self.BATCH):
            stop = min(n, start + self.BATCH)
            yield slice(start, stop)
            if settings.progress is not None:
                settings.progress(stop, n, n - stop)

    def distances(self, model: Classifier, images: torch.Tensor, labels: torch.Tensor,
                  settings: EngineSettings) -> torch.Tensor:
        """(N,) the norm (settings.norm) of the perturbation found for each image, classified correctly clean, on the
        model's device; inf where none was found. Judged by the model's own decision."""
        raise NotImplementedError


@torch.no_grad()
def decisions(model: Classifier, images: torch.Tensor) -> torch.Tensor:
    """The classifier's decision (B,): argmax of its class scores, the quantity every attack must flip."""
    return model(images).scores.argmax(dim=1)


def start_noise(
    ids: Sequence[int], shape: tuple[int, ...], *, seed: int, stream: str, device: torch.device | str
) -> torch.Tensor:
    """Uniform noise in [-1, 1] of `shape` per image id, fixed by (seed, stream, id) alone: (N, *shape)."""
    out = torch.empty(len(ids), *shape)
    for row, image_id in enumerate(int(i) for i in ids):
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
