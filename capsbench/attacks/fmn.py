"""`fmn`: Fast Minimum-Norm attack, Pintor, Roli, Brendel, Biggio, "Fast Minimum-norm Adversarial Attacks through
Adaptive Norm Constraints" (NeurIPS 2021, arXiv:2102.12827), as foolbox 3 has it (LInfFMNAttack, L2FMNAttack)."""

from __future__ import annotations

from typing import Any

import foolbox
import torch
from foolbox.devutils import atleast_kd, flatten

from capsbench.attacks.base import EngineSettings, MinimalAttack, decisions
from capsbench.models import Classifier, LogitsAdapter

BATCH = 250  # images per call, whatever the engine's pool: a result never depends on the batch


class FMN(MinimalAttack):
    """`steps` steps of FMN on the model's attack logits, untargeted, from the clean image."""

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
        return f"FMN (foolbox), {self.steps} steps, untargeted"

    def cost(self, eps: float, num_classes: int, norm: str = "linf") -> float:
        return float(2 * self.steps)

    def distances(self, model: Classifier, images: torch.Tensor, labels: torch.Tensor,
                  settings: EngineSettings) -> torch.Tensor:
        fmodel = foolbox.PyTorchModel(LogitsAdapter(model).eval(), bounds=(0.0, 1.0))
        make = ProjectingL2FMN if settings.norm == "l2" else foolbox.attacks.LInfFMNAttack
        attack = make(steps=self.steps)
        out = []
        for i in range(0, len(images), BATCH):
            x, y = images[i:i + BATCH], labels[i:i + BATCH]
            _, adversarial, _ = attack(fmodel, x, y, epsilons=None)
            out.append(found_distance(model, x, y, adversarial, settings.norm))
        return torch.cat(out) if out else torch.empty(0, device=images.device)


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
