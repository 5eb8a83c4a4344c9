"""The MultiMNIST training protocol (pairs drawn on the fly), its fixed cached test set, and top-2 metrics."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional as F

from capsbench.data.datasets import DatasetSpec, Splits
from capsbench.data.multimnist import MERGE_RULES, PairRecipe, draw_partners, make_recipe, pair_labels, place, render
from capsbench.errors import CapsbenchError
from capsbench.models import Classifier
from capsbench.train.protocols import Batch, TrainingProtocol
from capsbench.util.atomic import save_torch
from capsbench.util.hashing import content_key

log = logging.getLogger(__name__)

RECIPE_VERSION = 1  # bump when make_recipe changes what a seed produces: cached test sets are then rebuilt


def both_correct(scores: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """(N,) bool: the two highest-scoring classes are exactly the pair's two digits. scores (N, C), pairs (N, 2)."""
    top2 = scores.topk(2, dim=1).indices.sort(dim=1).values
    return (top2 == pairs.to(top2.device).sort(dim=1).values).all(dim=1)


def digits_found(scores: torch.Tensor, pairs: torch.Tensor) -> torch.Tensor:
    """(N, 2) bool: whether each of the pair's digits is among the two highest-scoring classes."""
    top2 = scores.topk(2, dim=1).indices  # (N, 2)
    return (pairs.to(top2.device).unsqueeze(2) == top2.unsqueeze(1)).any(dim=2)


class MultiMNISTProtocol(TrainingProtocol):
    """Sabour et al.'s MultiMNIST ("Dynamic Routing Between Capsules", arXiv:1710.09829, section 6).

    Every training image is overlaid with a digit of another class from the same batch (a uniform
    draw from the training split), each shifted by up to `max_shift` px on a `canvas` x `canvas`
    image; targets are multi-hot and the batch carries the two placed digits for reconstruction.
    Model selection uses both-correct accuracy on fixed pairs from the validation split.

    Args:
        max_shift: largest shift per axis of each digit (paper: 4).
        canvas: side of the generated images (paper: 36).
        merge: "saturating_sum" (paper) or "max".
        num_classes: of the dataset.
        val_pairs_per_digit, val_seed: the validation pairs (every validation digit is a first digit).
        cache_dir: where fixed test sets are cached.
    """

    name = "multimnist"
    augments_on_device = False  # partners are drawn per class on the host (draw_partners): a CPU generator

    def __init__(
        self,
        *,
        max_shift: int = 4,
        canvas: int = 36,
        merge: str = "saturating_sum",
        num_classes: int = 10,
        val_pairs_per_digit: int = 1,
        val_seed: int = 0,
        cache_dir: str | Path,
    ) -> None:
        if merge not in MERGE_RULES:
            raise CapsbenchError(f"params.merge={merge!r} is not a merge rule; use one of {', '.join(MERGE_RULES)}")
        if max_shift < 0:
            raise CapsbenchError(f"params.max_shift must be >= 0, got {max_shift}")
        if val_pairs_per_digit < 1:
            raise CapsbenchError(f"params.val_pairs_per_digit must be >= 1, got {val_pairs_per_digit}")
        super().__init__(max_shift=max_shift)
        self.canvas, self.merge, self.num_classes = canvas, merge, num_classes
        self.val_pairs_per_digit, self.val_seed = val_pairs_per_digit, val_seed
        self.cache_dir = Path(cache_dir)

    def input_size(self, image_size: int) -> int:
        if self.canvas < image_size + 2 * self.max_shift:
            raise CapsbenchError(
                f"params.canvas={self.canvas} cannot hold a {image_size}px digit shifted by {self.max_shift}px; "
                f"use canvas >= {image_size + 2 * self.max_shift} or a smaller max_shift"
            )
        return self.canvas

    def train_batch(self, images: torch.Tensor, labels: torch.Tensor, gen: torch.Generator) -> Batch:
        try:
            partners = draw_partners(labels, gen)
        except ValueError as exc:
            raise CapsbenchError(
                f"{exc}; MultiMNIST pairs digits within a batch: use a larger train.batch_size"
            ) from None
        offsets = torch.randint(-self.max_shift, self.max_shift + 1, (len(labels), 2, 2), generator=gen)
        recipe = PairRecipe(torch.arange(len(labels)), partners, offsets)
        inputs, components = render(images, recipe, canvas=self.canvas, rule=self.merge, device=images.device)
        pairs = pair_labels(labels, recipe)  # (B, 2)
        targets = F.one_hot(pairs, self.num_classes).sum(dim=1)  # (B, C) multi-hot, two ones
        return Batch(inputs, targets, components=components, component_labels=pairs)

    def eval_inputs(self, images: torch.Tensor) -> torch.Tensor:
        """Single digits, centred on the canvas."""
        return place(images, torch.zeros(len(images), 2, dtype=torch.long), self.canvas)

    def min_validation_score(self, spec: DatasetSpec) -> float:
        """Both-correct accuracy (%) below which a model is undertrained: 10 %, 4.5 x the chance of guessing an
        unordered pair of distinct classes (1/45 = 2.2 % for ten classes)."""
        return 10.0

    def validation_score(self, model: Classifier, splits: Splits, *, batch_size: int, device: str) -> float:
        """Both-correct accuracy on the fixed validation pairs (never the test split)."""
        recipe = make_recipe(
            splits.val_y, pairs_per_digit=self.val_pairs_per_digit, max_shift=self.max_shift, seed=self.val_seed
        )
        scores = self.pair_scores(model, splits.val_x, recipe, batch_size=batch_size, device=device)
        return both_correct(scores, pair_labels(splits.val_y, recipe)).float().mean().item()

    @torch.no_grad()
    def pair_scores(
        self, model: Classifier, images: torch.Tensor, recipe: PairRecipe, *, batch_size: int, device: str
    ) -> torch.Tensor:
        """Class scores (N, C) of the rendered pairs, in eval mode, on the CPU."""
        was_training = model.training
        model.eval()
        scores = []
        for start in range(0, len(recipe), batch_size):
            inputs, _ = render(
                images, recipe.slice(start, start + batch_size), canvas=self.canvas, rule=self.merge, device=device
            )
            scores.append(model(inputs).scores.cpu())
        model.train(was_training)
        return torch.cat(scores)

    def test_recipe(self, splits: Splits, *, pairs_per_digit: int, seed: int) -> PairRecipe:
        """The fixed test pairs, from the cache when this exact set was generated before."""
        if pairs_per_digit < 1:
            raise CapsbenchError(f"params.test_pairs_per_digit must be >= 1, got {pairs_per_digit}")
        knobs = {
            "dataset": splits.name,
            "test_labels_sha256": hashlib.sha256(splits.test_y.numpy().tobytes()).hexdigest(),
            "pairs_per_digit": pairs_per_digit,
            "max_shift": self.max_shift,
            "seed": seed,
            "version": RECIPE_VERSION,
        }
        path = self.cache_dir / f"multimnist-test-{content_key(knobs)}.pt"
        if path.exists():
            stored = torch.load(path, map_location="cpu", weights_only=True)
            return PairRecipe(stored["first"], stored["second"], stored["offsets"])
        recipe = make_recipe(splits.test_y, pairs_per_digit=pairs_per_digit, max_shift=self.max_shift, seed=seed)
        save_torch(recipe.to_dict(), path)
        log.info("MultiMNIST test set: %d pairs cached at %s", len(recipe), path)
        return recipe

    def identity(self) -> dict[str, Any]:
        return {
            "protocol": self.name,
            "max_shift": self.max_shift,
            "canvas": self.canvas,
            "merge": self.merge,
            "val_pairs_per_digit": self.val_pairs_per_digit,
            "val_seed": self.val_seed,
            "recipe_version": RECIPE_VERSION,
        }
