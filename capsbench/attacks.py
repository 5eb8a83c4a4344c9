"""L-inf attacks on [0, 1] pixels: torchattacks behind a (N, C)-logits adapter, a margin-loss PGD, and
worst-case-over-restarts adversarial examples judged by the classifier's own decision (argmax of scores)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torchattacks
from torch import nn
from torchattacks.attack import Attack

from capsbench.errors import CapsbenchError
from capsbench.models import Classifier, LogitsAdapter
from capsbench.registry import close_matches
from capsbench.suites.robustness_params import BLACK_BOX, WHITE_BOX  # torch-free: config validation needs the names

AUTOATTACK_STEPS = 100  # the standard AutoAttack's APGD-CE, APGD-T and FAB-T iterations (Croce & Hein 2020)
AUTOATTACK_SQUARE_QUERIES = 5000


@dataclass(frozen=True)
class AttackSettings:
    """How each attack is run; PGD's step size is step_ratio * eps / steps (Madry et al.'s 2.5 eps / k rule)."""

    steps: int
    step_ratio: float
    restarts: int
    square_queries: int
    num_classes: int
    seed: int


def attack_target(model: Classifier) -> nn.Module:
    """The module attacks see: (B, C, H, W) in [0, 1] -> (B, C) logits (log-normalised lengths for capsules)."""
    return LogitsAdapter(model).eval()


def margin(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Carlini-Wagner margin max_{j != y} z_j - z_y per example: (B, C), (B,) -> (B,); > 0 means misclassified."""
    true = logits.gather(1, labels[:, None]).squeeze(1)  # (B,)
    mask = torch.nn.functional.one_hot(labels, logits.shape[1]).bool()
    return logits.masked_fill(mask, float("-inf")).amax(dim=1) - true


class MarginPGD(Attack):
    """L-inf PGD with random start on the margin loss instead of cross-entropy.

    PGD from Madry et al., "Towards Deep Learning Models Resistant to Adversarial Attacks" (arXiv:1706.06083);
    the margin loss from Carlini & Wagner, "Towards Evaluating the Robustness of Neural Networks" (arXiv:1608.04644).
    Same steps, projection and random start as torchattacks.PGD; only the loss differs.

    Args:
        model: returns (B, C) logits.
        eps: L-inf radius; alpha: step size; steps: iterations; random_start: uniform start in the ball.
    Shapes: images (B, C, H, W) in [0, 1], labels (B,) -> adversarial images (B, C, H, W).
    """

    def __init__(self, model: nn.Module, *, eps: float, alpha: float, steps: int, random_start: bool = True) -> None:
        super().__init__("MarginPGD", model)
        self.eps, self.alpha, self.steps, self.random_start = eps, alpha, steps, random_start

    def forward(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        images = images.clone().detach().to(self.device)
        labels = labels.clone().detach().to(self.device)
        adv = images.clone()
        if self.random_start:
            adv = torch.clamp(adv + torch.empty_like(adv).uniform_(-self.eps, self.eps), 0, 1)
        for _ in range(self.steps):
            adv.requires_grad_(True)
            loss = margin(self.get_logits(adv), labels).sum()
            (grad,) = torch.autograd.grad(loss, adv)
            delta = torch.clamp(adv.detach() + self.alpha * grad.sign() - images, -self.eps, self.eps)
            adv = torch.clamp(images + delta, 0, 1)
        return adv.detach()


def standard_autoattack(model: nn.Module, *, eps: float, num_classes: int, seed: int) -> Attack:
    """AutoAttack 'standard' (Croce & Hein, arXiv:2003.01690) as published: APGD-CE, APGD-T, FAB-T at 100
    iterations and Square at 5000 queries, one restart each, fixed seed. torchattacks.AutoAttack runs its
    sub-attacks at their 10-iteration defaults with a time-based seed, so it is assembled here instead."""
    common = {"norm": "Linf", "eps": eps, "seed": seed, "n_restarts": 1}
    return torchattacks.MultiAttack([
        torchattacks.APGD(model, loss="ce", steps=AUTOATTACK_STEPS, **common),
        torchattacks.APGDT(model, steps=AUTOATTACK_STEPS, n_classes=num_classes, **common),
        torchattacks.FAB(model, steps=AUTOATTACK_STEPS, multi_targeted=True, n_classes=num_classes, **common),
        torchattacks.Square(model, n_queries=AUTOATTACK_SQUARE_QUERIES, **common),
    ])


def build_attack(name: str, model: nn.Module, *, eps: float, settings: AttackSettings) -> Attack:
    """One registered attack at radius eps against `model` (an attack_target)."""
    alpha = settings.step_ratio * eps / settings.steps
    if name == "fgsm":
        return torchattacks.FGSM(model, eps=eps)
    if name == "pgd":
        return torchattacks.PGD(model, eps=eps, alpha=alpha, steps=settings.steps, random_start=True)
    if name == "pgd_margin":
        return MarginPGD(model, eps=eps, alpha=alpha, steps=settings.steps, random_start=True)
    if name == "square":
        return torchattacks.Square(
            model, norm="Linf", eps=eps, n_queries=settings.square_queries, n_restarts=1, loss="margin", seed=settings.seed
        )
    if name == "autoattack":
        return standard_autoattack(model, eps=eps, num_classes=settings.num_classes, seed=settings.seed)
    raise CapsbenchError(f"unknown attack {name!r}: {close_matches(name, [*WHITE_BOX, *BLACK_BOX])}")


def restarts_for(name: str, settings: AttackSettings) -> int:
    """Random-start attacks are restarted; deterministic ones (FGSM) and self-seeded ones run once."""
    return settings.restarts if name in ("pgd", "pgd_margin") else 1


@torch.no_grad()
def decisions(model: Classifier, images: torch.Tensor) -> torch.Tensor:
    """The classifier's decision (B,): argmax of its class scores, the quantity every attack must flip."""
    return model(images).scores.argmax(dim=1)


def worst_case(
    attack: Attack, model: Classifier, images: torch.Tensor, labels: torch.Tensor, *, restarts: int
) -> torch.Tensor:
    """Adversarial images (B, C, H, W): each restart attacks only the images every earlier restart failed on."""
    adv = attack(images, labels)
    for _ in range(restarts - 1):
        robust = (decisions(model, adv) == labels).nonzero().squeeze(1)
        if len(robust) == 0:
            break
        adv[robust] = attack(images[robust], labels[robust])
    return adv
