"""Attacks taken from torchattacks as they are: the black-box Square attack (a gradient-masking check) and the
standard AutoAttack assembled from its parts. Both see the model's (B, C) attack logits through LogitsAdapter."""

from __future__ import annotations

import torch
import torchattacks

from capsbench.attacks.base import Attack, AttackResult, AttackSettings, decisions
from capsbench.models import Classifier, LogitsAdapter

AUTOATTACK_STEPS = 100  # the standard AutoAttack's APGD-CE, APGD-T and FAB-T iterations (Croce & Hein 2020)
AUTOATTACK_SQUARE_QUERIES = 5000


class _TorchAttacksAdapter(Attack):
    """Runs a torchattacks attack per eps and batch and judges its output by the model's own decision.

    These attacks draw their random numbers per call, so their result depends on which images share a call: they
    run in fixed batches of `batch` images (in test-set order), never params.batch_size, which may change the cost
    but must not change a result."""

    batch = 250

    def build(self, target: torch.nn.Module, eps: float, settings: AttackSettings) -> torchattacks.attack.Attack:
        raise NotImplementedError

    def queries(self, settings: AttackSettings) -> int:
        """Model passes per image at one eps, at most: the declared work of progress estimates."""
        raise NotImplementedError

    def run(self, model: Classifier, images: torch.Tensor, labels: torch.Tensor, ids: torch.Tensor,
            eps_values: list[float], settings: AttackSettings) -> AttackResult:
        target = LogitsAdapter(model).eval()
        broken, adversarial = {}, {}
        total, done = len(images) * len(eps_values), 0  # progress in rows (image x eps), reported per batch
        for eps in eps_values:
            adv = images.clone()
            for i in range(0, len(images), self.batch):
                batch = slice(i, i + self.batch)
                adv[batch] = self.build(target, eps, settings)(images[batch], labels[batch])
                done += len(images[batch])
                if settings.progress is not None:
                    settings.progress(done, total, total - done)
            broken[eps] = decisions(model, adv) != labels
            adversarial[eps] = adv
        return AttackResult(broken, adversarial)


class Square(_TorchAttacksAdapter):
    """Andriushchenko et al., "Square Attack: a query-efficient black-box adversarial attack via random search"
    (arXiv:1912.00049), margin loss, one restart, fixed seed (torchattacks.Square)."""

    name = "square"
    attacks = "the model's attack logits through queries only (no gradients)"

    def budget(self, settings: AttackSettings) -> str:
        return f"{settings.square_queries} queries, margin loss, 1 restart"

    def queries(self, settings: AttackSettings) -> int:
        return settings.square_queries

    def build(self, target, eps, settings):
        return torchattacks.Square(target, norm="Linf", eps=eps, n_queries=settings.square_queries, n_restarts=1,
                                   loss="margin", seed=settings.seed)


class AutoAttack(_TorchAttacksAdapter):
    """AutoAttack 'standard' (Croce & Hein, arXiv:2003.01690) as published: APGD-CE, APGD-T, FAB-T at 100 iterations and
    Square at 5000 queries, one restart each, fixed seed. torchattacks.AutoAttack runs its sub-attacks at their
    10-iteration defaults with a time-based seed, so it is assembled here instead."""

    name = "autoattack"
    attacks = "the model's attack logits (APGD-CE, APGD-T, FAB-T, Square)"

    def budget(self, settings: AttackSettings) -> str:
        return f"APGD-CE, APGD-T, FAB-T at {AUTOATTACK_STEPS} iterations, Square at {AUTOATTACK_SQUARE_QUERIES} queries"

    def queries(self, settings: AttackSettings) -> int:
        # APGD-CE, APGD-T over 9 target classes and FAB-T over 9, forward and backward per step; then Square
        return 2 * AUTOATTACK_STEPS * (1 + 2 * (settings.num_classes - 1)) + AUTOATTACK_SQUARE_QUERIES

    def build(self, target, eps, settings):
        common = {"norm": "Linf", "eps": eps, "seed": settings.seed, "n_restarts": 1}
        n = settings.num_classes
        return torchattacks.MultiAttack([
            torchattacks.APGD(target, loss="ce", steps=AUTOATTACK_STEPS, **common),
            torchattacks.APGDT(target, steps=AUTOATTACK_STEPS, n_classes=n, **common),
            torchattacks.FAB(target, steps=AUTOATTACK_STEPS, multi_targeted=True, n_classes=n, **common),
            torchattacks.Square(target, n_queries=AUTOATTACK_SQUARE_QUERIES, **common),
        ])
