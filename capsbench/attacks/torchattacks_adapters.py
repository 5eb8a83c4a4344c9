"""Attacks taken from torchattacks as they are, run per eps and batch and judged by the model's own decision; they see
the model's (B, C) attack logits through LogitsAdapter."""

from __future__ import annotations

import torch
import torchattacks

from capsbench.attacks.base import AttackResult, EngineSettings, QueryAttack, decisions
from capsbench.models import Classifier, LogitsAdapter


class LibraryAttack(QueryAttack):
    """A torchattacks attack. These draw their random numbers per call, so their result depends on which images share
    a call: they run in fixed batches of `batch` images (in test-set order), never the engine's batch size, which may
    change the cost but must not change a result."""

    batch = 250

    def build(self, target: torch.nn.Module, eps: float, settings: EngineSettings) -> torchattacks.attack.Attack:
        raise NotImplementedError

    def run(self, model: Classifier, images: torch.Tensor, labels: torch.Tensor, ids: torch.Tensor,
            eps_values: list[float], settings: EngineSettings) -> AttackResult:
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
