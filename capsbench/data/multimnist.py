"""MultiMNIST generation (Sabour et al. 2017, arXiv:1710.09829, section 6): pair recipes, rendering, overlap.

A pair is a recipe (two indices into one split and one shift per digit); images are rendered from
the recipe on demand, so a fixed test set of millions of pairs costs bytes per pair, not pixels.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MERGE_RULES = ("saturating_sum", "max")


@dataclass
class PairRecipe:
    """N pairs: `first`, `second` (N,) indices into one split; `offsets` (N, 2, 2) = (digit, (dy, dx)) in pixels."""

    first: torch.Tensor
    second: torch.Tensor
    offsets: torch.Tensor

    def __len__(self) -> int:
        return len(self.first)

    def slice(self, start: int, stop: int) -> PairRecipe:
        return PairRecipe(self.first[start:stop], self.second[start:stop], self.offsets[start:stop])

    def to_dict(self) -> dict[str, torch.Tensor]:
        return {"first": self.first, "second": self.second, "offsets": self.offsets}


def draw_partners(labels: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """For every row, the index of a uniformly drawn row with a different label. Shapes: (N,) -> (N,).

    Raises ValueError when fewer than two classes are present (no partner exists).
    """
    labels = labels.cpu()
    if len(labels.unique()) < 2:
        raise ValueError(f"cannot pair digits of different classes: all {len(labels)} labels are {labels[0].item()}")
    partners = torch.empty_like(labels)
    for c in labels.unique().tolist():
        rows = (labels == c).nonzero().squeeze(1)
        pool = (labels != c).nonzero().squeeze(1)
        partners[rows] = pool[torch.randint(len(pool), (len(rows),), generator=gen)]
    return partners


def make_recipe(labels: torch.Tensor, *, pairs_per_digit: int, max_shift: int, seed: int) -> PairRecipe:
    """Every digit of the split is the first digit of `pairs_per_digit` pairs, its partner drawn from the
    other classes of the same split; each digit shifted by independent integers in [-max_shift, max_shift]."""
    if pairs_per_digit < 1:
        raise ValueError(f"pairs_per_digit must be >= 1, got {pairs_per_digit}")
    gen = torch.Generator().manual_seed(seed)
    first = torch.arange(len(labels)).repeat_interleave(pairs_per_digit)  # (N,)
    second = draw_partners(labels.cpu()[first], gen)  # indices into `first`, mapped back below
    offsets = torch.randint(-max_shift, max_shift + 1, (len(first), 2, 2), generator=gen, dtype=torch.int64)
    return PairRecipe(first, first[second], offsets)


def place(images: torch.Tensor, offsets: torch.Tensor, canvas: int) -> torch.Tensor:
    """Paste each image, centred and then moved by its (dy, dx), onto a zero canvas.

    Shapes: images (B, C, h, w), offsets (B, 2) -> (B, C, canvas, canvas). Offsets must keep the image inside.
    """
    b, c, h, w = images.shape
    margin = (canvas - h) // 2
    offsets = offsets.to(images.device)
    rows = (margin + offsets[:, 0]).view(b, 1, 1) + torch.arange(h, device=images.device).view(1, h, 1)  # (B, h, 1)
    cols = (margin + offsets[:, 1]).view(b, 1, 1) + torch.arange(w, device=images.device).view(1, 1, w)  # (B, 1, w)
    index = (rows * canvas + cols).view(b, 1, h * w).expand(b, c, h * w)
    out = images.new_zeros(b, c, canvas * canvas)
    out.scatter_(2, index, images.flatten(2))
    return out.view(b, c, canvas, canvas)


def merge(a: torch.Tensor, b: torch.Tensor, rule: str) -> torch.Tensor:
    """Overlay two images in [0, 1]: `saturating_sum` = min(a + b, 1) (Sabour's overlay), or pixelwise `max`."""
    if rule == "saturating_sum":
        return (a + b).clamp_(max=1.0)
    if rule == "max":
        return torch.maximum(a, b)
    raise ValueError(f"unknown merge rule {rule!r}; expected one of {MERGE_RULES}")


def render(
    images: torch.Tensor, recipe: PairRecipe, *, canvas: int, rule: str, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Merged pairs (B, C, canvas, canvas) in [0, 1] and their two placed digits (B, 2, C, canvas, canvas).

    `images` are the split's digits (uint8 or float in [0, 1]); the recipe indexes into them.
    """
    digits = []
    for k, index in enumerate((recipe.first, recipe.second)):
        x = images[index].to(device)
        x = x.float().div_(255.0) if x.dtype == torch.uint8 else x.float()
        digits.append(place(x, recipe.offsets[:, k], canvas))
    return merge(digits[0], digits[1], rule), torch.stack(digits, dim=1)


def pair_labels(labels: torch.Tensor, recipe: PairRecipe) -> torch.Tensor:
    """The two digits' classes (N, 2), in recipe order."""
    return torch.stack([labels[recipe.first], labels[recipe.second]], dim=1)


def bounding_boxes(images: torch.Tensor) -> torch.Tensor:
    """Tight boxes (N, 4) = (top, left, bottom, right), exclusive ends, of each image's nonzero pixels."""
    ink = images.flatten(1, -3).amax(dim=1) > 0  # (N, h, w)
    rows, cols = ink.any(dim=2), ink.any(dim=1)  # (N, h), (N, w)

    def span(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.arange(mask.shape[1]).expand_as(mask)
        start = torch.where(mask, idx, mask.shape[1]).amin(dim=1)
        stop = torch.where(mask, idx + 1, 0).amax(dim=1)
        return start, stop

    (top, bottom), (left, right) = span(rows), span(cols)
    return torch.stack([top, left, bottom, right], dim=1)


def box_overlap(boxes: torch.Tensor, recipe: PairRecipe) -> torch.Tensor:
    """Per pair, the area of the two shifted digits' box intersection over the smaller box's area. (N,) in [0, 1].

    Sabour et al. state "about 80 %" for 20x20 digit boxes shifted up to 4 px.
    """
    a = boxes[recipe.first].clone()  # (N, 4)
    b = boxes[recipe.second].clone()
    for box, k in ((a, 0), (b, 1)):
        box[:, 0::2] += recipe.offsets[:, k, 0:1]  # rows move by dy
        box[:, 1::2] += recipe.offsets[:, k, 1:2]  # columns move by dx
    inter_h = (torch.minimum(a[:, 2], b[:, 2]) - torch.maximum(a[:, 0], b[:, 0])).clamp(min=0)
    inter_w = (torch.minimum(a[:, 3], b[:, 3]) - torch.maximum(a[:, 1], b[:, 1])).clamp(min=0)
    smaller = torch.minimum(_area(a), _area(b)).clamp(min=1)
    return (inter_h * inter_w).float() / smaller.float()


def _area(boxes: torch.Tensor) -> torch.Tensor:
    return (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
