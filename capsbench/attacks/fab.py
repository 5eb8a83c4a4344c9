"""`fab`: Fast Adaptive Boundary attack, Croce and Hein, "Minimally distorted Adversarial Examples with a Fast Adaptive
Boundary Attack" (ICML 2020, arXiv:1907.02044), as torchattacks has it."""

from __future__ import annotations

import math

import torch
import torchattacks

from capsbench.attacks.base import EngineSettings, MinimalAttack
from capsbench.attacks.fmn import found_distance
from capsbench.models import Classifier, LogitsAdapter


class FAB(MinimalAttack):
    """`steps` steps of untargeted FAB on the model's attack logits, one restart, the engine's seed; its radius set
    beyond any image's reach so that it returns the smallest perturbation it finds."""

    name = "fab"
    attacks = "the model's attack logits (its smallest adversarial perturbation)"
    LABEL = "FAB"
    MINIMAL = True
    ORDER = 110
    NORMS = ("linf", "l2")
    ARGUMENT_RANGES = {"steps": "int [1, inf)"}

    def __init__(self, *, steps: int = 100) -> None:
        self.steps = steps

    def budget(self, num_classes: int) -> str:
        return f"FAB (torchattacks), {self.steps} steps, untargeted, 1 restart"

    def cost(self, eps: float, num_classes: int, norm: str = "linf") -> float:
        return float(self.steps * (1 + num_classes))  # a forward pass and every class's gradient per step

    def distances(self, model: Classifier, images: torch.Tensor, labels: torch.Tensor,
                  settings: EngineSettings) -> torch.Tensor:
        reach = math.sqrt(images[0].numel()) if settings.norm == "l2" else 1.0  # any image within [0, 1]
        attack = torchattacks.FAB(LogitsAdapter(model).eval(), norm="L2" if settings.norm == "l2" else "Linf",
                                  eps=reach, steps=self.steps, n_restarts=1, n_classes=settings.num_classes,
                                  seed=settings.seed)
        out = [found_distance(model, images[b], labels[b], attack(images[b], labels[b]), settings.norm)
               for b in self.batches(len(images), settings)]
        return torch.cat(out) if out else torch.empty(0, device=images.device)
