"""The L-inf gradient attacks: one PGD engine (random start, sign steps, projection; per-row eps so that an eps grid
runs as one batch; rows leave the batch once broken) and the standard FGSM and PGD built on it.

PGD: Madry et al., "Towards Deep Learning Models Resistant to Adversarial Attacks" (arXiv:1706.06083). FGSM: Goodfellow
et al., "Explaining and Harnessing Adversarial Examples" (arXiv:1412.6572). Margin loss: Carlini & Wagner, "Towards
Evaluating the Robustness of Neural Networks" (arXiv:1608.04644).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import torch
from torch.nn import functional as F

from capsbench.attacks.base import REJECTED, Attack, AttackResult, AttackSettings, decisions, start_noise
from capsbench.attacks.objectives import Objective
from capsbench.models import Classifier


def margin(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Carlini-Wagner margin max_{j != y} z_j - z_y per example: (B, C), (B,) -> (B,); > 0 means misclassified."""
    true = logits.gather(1, labels[:, None]).squeeze(1)  # (B,)
    mask = F.one_hot(labels, logits.shape[1]).bool()
    return logits.masked_fill(mask, float("-inf")).amax(dim=1) - true


LOSSES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "ce": lambda logits, labels: F.cross_entropy(logits, labels, reduction="none"),
    "margin": margin,
}


def pgd_rows(
    objective: Objective, images: torch.Tensor, labels: torch.Tensor, eps: torch.Tensor, *, steps: int,
    step_size: torch.Tensor, loss: str, noise: torch.Tensor | None, early_exit: bool = True,
    on_step: Callable[[int, int], None] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """L-inf PGD, one row per (image, eps): images (R, C, H, W) in [0, 1], labels (R,), eps and step_size (R,),
    noise (R, C, H, W) in [-1, 1] for a random start (scaled by eps) or None.

    Every iterate 0..steps is judged by the real model's decision (or the defended model's, where a REJECTED decision
    is never a success); a row is broken when any iterate is wrong. With
    early_exit a broken row leaves the batch at once (rows with eps = 0 after iterate 0): the same result, less work.
    Returns broken (R,) and adversarial images (R, C, H, W): the first breaking iterate, else the last.
    on_step(row_steps, rows_left) follows the work: R row-steps per iterate judged, the iterates early exit skips at
    the end, so that the calls add up to R * (steps + 1).
    """
    rows = torch.arange(len(images), device=images.device)
    shape = (-1,) + (1,) * (images.dim() - 1)
    lower = (images - eps.view(shape)).clamp(min=0.0)
    upper = (images + eps.view(shape)).clamp(max=1.0)
    x = images.clone() if noise is None else torch.min(torch.max(images + noise * eps.view(shape), lower), upper)
    broken = torch.zeros(len(images), dtype=torch.bool, device=images.device)
    adversarial = x.clone()
    live = rows  # rows still attacked: (indices into the R rows)
    for t in range(steps + 1):
        last = t == steps
        xa = x[live].requires_grad_(not last)
        judged = None
        if not last or objective.real_forward:
            with torch.set_grad_enabled(not last):
                judged = objective(xa)
        decided = None if judged is None else judged.decided
        if decided is None:  # a surrogate objective: the real model decides
            decided = decisions(objective.model, xa.detach())
        newly = (decided != labels[live]) & (decided != REJECTED) & ~broken[live]
        adversarial[live[newly]] = xa.detach()[newly]
        broken[live[newly]] = True
        if last:
            _report(on_step, len(images), 0)
            break
        value = LOSSES[loss](judged.logits, labels[live])  # (B,)
        if judged.penalty is not None:
            value = value - judged.penalty
        (grad,) = torch.autograd.grad(value.sum(), xa)
        stepped = xa.detach() + step_size[live].view(shape) * grad.sign()
        x[live] = torch.min(torch.max(stepped, lower[live]), upper[live])
        if early_exit:
            live = live[~broken[live] & (eps[live] > 0)]
        _report(on_step, len(images) * (1 if len(live) else steps - t + 1), len(live))
        if len(live) == 0:
            break
    unbroken = ~broken
    adversarial[unbroken] = x[unbroken]
    return broken, adversarial


def _report(on_step: Callable[[int, int], None] | None, row_steps: int, left: int) -> None:
    if on_step is not None:
        on_step(row_steps, left)


class PGD(Attack):
    """L-inf PGD with a uniform random start, `steps` sign steps of step_ratio * eps / steps, once with cross-entropy
    and once with the margin loss on the images cross-entropy left unbroken, each repeated `restarts` times on the
    survivors: an image is robust only if every run fails at every iterate."""

    name: ClassVar[str] = "pgd"
    attacks = "the model's attack logits (log-normalised capsule lengths; CNN logits)"
    losses: ClassVar[tuple[str, ...]] = ("ce", "margin")
    objective: ClassVar[type[Objective]] = Objective

    def budget(self, settings: AttackSettings) -> str:
        losses = " then ".join(self.losses)
        return (f"{settings.steps} steps of {settings.step_ratio:g} eps/{settings.steps}, random start, {losses} loss, "
                f"{settings.restarts} restart(s) each")

    def steps(self, settings: AttackSettings) -> int:
        return settings.steps

    def step_sizes(self, eps: torch.Tensor, settings: AttackSettings) -> torch.Tensor:
        return settings.step_ratio * eps / settings.steps

    def restarts(self, settings: AttackSettings) -> int:
        return settings.restarts

    def random_start(self) -> bool:
        return True

    def make_objectives(self, model: Classifier, settings: AttackSettings) -> list[Objective]:
        """What the attack differentiates, in turn: each later objective attacks only what the earlier left."""
        return [self.objective(model)]

    def run(self, model: Classifier, images: torch.Tensor, labels: torch.Tensor, ids: torch.Tensor,
            eps_values: list[float], settings: AttackSettings) -> AttackResult:
        n, k = len(images), len(eps_values)
        eps_all = torch.tensor(eps_values, dtype=images.dtype, device=images.device).repeat(n)  # (N*k,) image-major
        image_of_row = torch.arange(n, device=images.device).repeat_interleave(k)  # (N*k,)
        broken = torch.zeros(n * k, dtype=torch.bool, device=images.device)
        adversarial = images[image_of_row].clone()
        objectives = self.make_objectives(model, settings)
        tally = _Tally(settings.progress, n * k * len(self._runs(objectives, settings)) * (self.steps(settings) + 1))
        for start in range(0, n * k, settings.batch_size):
            chunk = torch.arange(start, min(start + settings.batch_size, n * k), device=images.device)
            self._attack_chunk(objectives, images, labels, ids, image_of_row[chunk], eps_all[chunk], settings,
                               broken, adversarial, chunk, tally)
        return AttackResult(
            broken={e: broken.view(n, k)[:, j] for j, e in enumerate(eps_values)},
            adversarial={e: adversarial.view(n, k, *images.shape[1:])[:, j] for j, e in enumerate(eps_values)},
        )

    def _runs(self, objectives: list[Objective], settings: AttackSettings) -> list[tuple[Objective, int, str]]:
        return [(o, r, loss) for o in objectives for r in range(self.restarts(settings)) for loss in self.losses]

    def _attack_chunk(self, objectives, images, labels, ids, image_rows, eps, settings, broken, adversarial, chunk,
                      tally):
        """Every (objective, restart, loss) run attacks only the rows of this chunk that no earlier run broke."""
        runs = self._runs(objectives, settings)
        per_run = len(chunk) * (self.steps(settings) + 1)  # row-steps of one run over the whole chunk
        for i, (objective, restart, loss) in enumerate(runs):
            alive = ~broken[chunk]
            if not alive.any():
                tally.skip(per_run * (len(runs) - i))
                return
            tally.skip(per_run - int(alive.sum()) * (self.steps(settings) + 1))  # rows an earlier run broke
            rows, img = chunk[alive], image_rows[alive]
            noise = None
            if self.random_start():
                unique, inverse = img.unique(return_inverse=True)
                # Every PGD-family attack starts from the same points for a seed: only its objective differs.
                noise = start_noise(ids[unique.cpu()], tuple(images.shape[1:]), seed=settings.seed,
                                    stream=f"{loss}/{restart}", device=images.device)[inverse]
            hit, adv = pgd_rows(objective, images[img], labels[img], eps[alive], steps=self.steps(settings),
                                step_size=self.step_sizes(eps[alive], settings), loss=loss, noise=noise,
                                early_exit=settings.early_exit, on_step=tally.step)
            broken[rows] = hit
            adversarial[rows] = adv


class _Tally:
    """An attack's row-steps for AttackSettings.progress: done of total, and the rows the current run has left."""

    def __init__(self, progress: Callable[[int, int, int], None] | None, total: int) -> None:
        self.progress, self.total, self.done, self.left = progress, total, 0, 0

    def step(self, row_steps: int, left: int) -> None:
        self.done, self.left = self.done + row_steps, left
        if self.progress is not None:
            self.progress(self.done, self.total, left)

    def skip(self, row_steps: int) -> None:
        if row_steps:
            self.step(row_steps, self.left)


class FGSM(PGD):
    """FGSM: one signed-gradient step of size eps on cross-entropy from the clean image."""

    name = "fgsm"
    losses = ("ce",)

    def budget(self, settings: AttackSettings) -> str:
        return "one step of size eps on cross-entropy, no random start"

    def steps(self, settings: AttackSettings) -> int:
        return 1

    def step_sizes(self, eps: torch.Tensor, settings: AttackSettings) -> torch.Tensor:
        return eps

    def restarts(self, settings: AttackSettings) -> int:
        return 1

    def random_start(self) -> bool:
        return False
