"""`fmn`: Fast Minimum-Norm attack, Pintor, Roli, Brendel, Biggio, "Fast Minimum-norm Adversarial Attacks through
Adaptive Norm Constraints" (NeurIPS 2021, arXiv:2102.12827), as foolbox 3 has it (LInfFMNAttack, L2FMNAttack), run
from two starts per image: the clean image, and the nearest attacked image the model assigns another class (the
paper's adversarial initialisation, foolbox's starting_points: a boundary search towards it, then FMN from the
adversarial side). From the clean image alone FMN can stall below the boundary: each step is projected onto the norm
ball and then clipped to [0, 1], and where most pixels sit at 0 or 1 (MNIST) the clip takes back much of each step,
so the ball's radius, grown from the margin's slope, never reaches the boundary. On the quick models it found nothing
for 131 (cnn_sabour), 189 (cnn_9x9) and 193 (CapsNet) of about 990 MNIST test images in L2 (the one-seed run of
6eb60e3 that results/robustness_l2-quick-cpu2.md compares with)."""

from __future__ import annotations

from typing import Any

import foolbox
import torch
from foolbox.devutils import atleast_kd, flatten

from capsbench.attacks.base import EngineSettings, MinimalAttack, decisions
from capsbench.models import Classifier, LogitsAdapter

SEARCH_STEPS = 10  # the boundary search from the clean image towards the start (foolbox's default)


class FMN(MinimalAttack):
    """`steps` steps of FMN on the model's attack logits, untargeted, from each of the two starts (module docstring):
    per image the smaller distance."""

    name = "fmn"
    attacks = "the model's attack logits (its smallest adversarial perturbation)"
    LABEL = "FMN"
    MINIMAL = True
    ORDER = 100
    NORMS = ("linf", "l2")
    ARGUMENT_RANGES = {"steps": "int [1, inf)"}

    def __init__(self, *, steps: int = 100) -> None:
        self.steps = steps

    def budget(self, num_classes: int) -> str:
        return (f"FMN (foolbox), {self.steps} steps, untargeted, from the clean image and from the nearest attacked "
                "image of another class")

    def cost(self, eps: float, num_classes: int, norm: str = "linf") -> float:
        return float(2 * (2 * self.steps) + SEARCH_STEPS)  # two starts; the boundary search reads no gradient

    def distances(self, model: Classifier, images: torch.Tensor, labels: torch.Tensor,
                  settings: EngineSettings) -> torch.Tensor:
        fmodel = foolbox.PyTorchModel(LogitsAdapter(model).eval(), bounds=(0.0, 1.0))
        make = ProjectingL2FMN if settings.norm == "l2" else foolbox.attacks.LInfFMNAttack
        attack = make(steps=self.steps, binary_search_steps=SEARCH_STEPS)
        decided = torch.cat([decisions(model, images[i:i + self.BATCH]) for i in range(0, len(images), self.BATCH)]
                            or [labels[:0]])
        out = []
        for b in self.batches(len(images), settings):
            x, y = images[b], labels[b]
            _, adversarial, _ = attack(fmodel, x, y, epsilons=None)
            found = found_distance(model, x, y, adversarial, settings.norm)
            start = nearest_other_class(x, y, images, decided, settings.norm)
            has = start >= 0
            if has.any():
                _, adversarial, _ = attack(fmodel, x[has], y[has], epsilons=None, starting_points=images[start[has]])
                found[has] = torch.minimum(found[has], found_distance(model, x[has], y[has], adversarial,
                                                                      settings.norm))
            out.append(found)
        return torch.cat(out) if out else torch.empty(0, device=images.device)


def nearest_other_class(x: torch.Tensor, y: torch.Tensor, pool: torch.Tensor, decided: torch.Tensor,
                        norm: str) -> torch.Tensor:
    """(B,) per image of x the index in `pool` of the nearest image (in `norm`) whose decision (`decided`) is not its
    label y: an adversarial start; -1 where the pool has none."""
    gaps = torch.cdist(x.flatten(1), pool.flatten(1), p=2.0 if norm == "l2" else float("inf"))
    gaps = gaps.masked_fill(decided[None, :] == y[:, None], float("inf"))
    nearest = gaps.argmin(dim=1)
    return torch.where(torch.isfinite(gaps.gather(1, nearest[:, None])[:, 0]), nearest, torch.full_like(nearest, -1))


class ProjectingL2FMN(foolbox.attacks.L2FMNAttack):
    """foolbox's L2 FMN, projecting onto the L2 ball of radius epsilon as the paper's algorithm does: foolbox 3.3.4
    scales the step by min(1, norms / norms), which is always 1, so it never projects and returns about its first
    adversarial step (on a linear model 3x the closed-form distance; tests/test_minimal.py)."""

    def project(self, x: Any, x0: Any, epsilon: Any) -> Any:  # eagerpy tensors, as foolbox hands them
        delta = x - x0
        norms = flatten(delta).norms.l2(axis=-1).maximum(1e-12)
        return x0 + delta * atleast_kd((epsilon / norms).minimum(1.0), x.ndim)


def found_distance(model: Classifier, images: torch.Tensor, labels: torch.Tensor, adversarial: torch.Tensor,
                   norm: str) -> torch.Tensor:
    """(N,) each adversarial image's distance to its clean image in `norm`, inf where the model's decision on it is
    still the label (the library's success is not taken on trust)."""
    offset = (adversarial - images).flatten(1)
    length = offset.norm(dim=1) if norm == "l2" else offset.abs().amax(dim=1)
    return torch.where(decisions(model, adversarial) != labels, length, torch.full_like(length, float("inf")))
