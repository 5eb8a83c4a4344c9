"""The L-inf gradient attacks: one PGD engine (random start, sign steps, projection; per-row eps so that an eps grid
runs as one batch; rows leave the batch once broken) and the standard FGSM and PGD built on it.

PGD: Madry et al., "Towards Deep Learning Models Resistant to Adversarial Attacks" (arXiv:1706.06083). FGSM: Goodfellow
et al., "Explaining and Harnessing Adversarial Examples" (arXiv:1412.6572). Margin loss: Carlini & Wagner, "Towards
Evaluating the Robustness of Neural Networks" (arXiv:1608.04644).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch

from capsbench.attacks.base import REJECTED, Attack, AttackResult, AttackSettings, decisions, start_noise
from capsbench.attacks.losses import TARGETED as TARGETED_LOSSES
from capsbench.attacks.losses import loss_values
from capsbench.attacks.objectives import Judgement, Objective
from capsbench.models import Classifier
from capsbench.util.precision import autocast

TARGETED = "targeted"  # the loss of pgd_adaptive's multi-targeted passes: targeted_margin towards a ranked class


@dataclass(frozen=True)
class Pass:
    """One run over the rows no earlier pass broke: what it differentiates, its loss (capsbench.attacks.losses: "ce",
    "margin", "dlr", or a targeted one towards the class ranked `offset` among the others) and which restart it is
    (its random start)."""

    objective: Objective
    loss: str
    restart: int = 0
    offset: int = 0

    @property
    def targeted(self) -> bool:
        return self.loss in TARGETED_LOSSES

    @property
    def stream(self) -> str:
        """The random-start stream: every PGD-family attack starts from the same points for a loss and restart."""
        return f"{self.loss}{self.offset if self.targeted else ''}/{self.restart}"



def judge_iterate(objective: Objective, xa: torch.Tensor, labels: torch.Tensor, live: torch.Tensor,
                  broken: torch.Tensor, adversarial: torch.Tensor, *, last: bool, precision: str) -> Judgement | None:
    """The objective on the iterate xa of the live rows (with its graph unless last; None on the last step of an
    objective that needs no real forward pass), the real model deciding where the objective is a surrogate; rows it
    newly misclassifies (not rejected) are marked in broken and their iterate kept in adversarial."""
    judged = None
    with autocast(xa.device.type, precision):
        if not last or objective.real_forward:
            with torch.set_grad_enabled(not last):
                judged = objective(xa)
        decided = None if judged is None else judged.decided
        if decided is None:  # a surrogate objective: the real model decides
            decided = decisions(objective.model, xa.detach())
    newly = (decided != labels[live]) & (decided != REJECTED) & ~broken[live]
    adversarial[live[newly]] = xa.detach()[newly]
    broken[live[newly]] = True
    return judged


def iterate_loss(judged: Judgement, loss: str, labels: torch.Tensor, targets: torch.Tensor | None,
                 live: torch.Tensor) -> torch.Tensor:
    """(B,) the loss an attack ascends on the live rows, less the objective's penalty where it has one."""
    value = loss_values(loss, judged.logits, labels[live], None if targets is None else targets[live])
    return value if judged.penalty is None else value - judged.penalty

def pgd_rows(
    objective: Objective, images: torch.Tensor, labels: torch.Tensor, eps: torch.Tensor, *, steps: int,
    step_size: torch.Tensor, loss: str, noise: torch.Tensor | None, early_exit: bool = True,
    targets: torch.Tensor | None = None, precision: str = "fp32", on_step: Callable[[int, int], None] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """L-inf PGD, one row per (image, eps): images (R, C, H, W) in [0, 1], labels (R,), eps and step_size (R,),
    noise (R, C, H, W) in [-1, 1] for a random start (scaled by eps) or None, targets (R,) for the targeted loss.

    Every iterate 0..steps is judged by the real model's decision (or the defended model's, where a REJECTED decision
    is never a success); a row is broken when any iterate is wrong (whichever class it lands on, for a targeted loss
    too). With early_exit a broken row leaves the batch at once (rows with eps = 0 after iterate 0): the same result,
    less work. With precision=bf16 the forward and backward passes run under bf16 autocast, and the fp32 model judges
    each row once at the end, on its first bf16-breaking iterate, else its last: broken means wrong in fp32.
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
        judged = judge_iterate(objective, xa, labels, live, broken, adversarial, last=last, precision=precision)
        if last:
            report_steps(on_step, len(images), 0)
            break
        value = iterate_loss(judged, loss, labels, targets, live)  # (B,)
        (grad,) = torch.autograd.grad(value.sum(), xa)
        stepped = xa.detach() + step_size[live].view(shape) * grad.sign()
        x[live] = torch.min(torch.max(stepped, lower[live]), upper[live])
        if early_exit:
            live = live[~broken[live] & (eps[live] > 0)]
        report_steps(on_step, len(images) * (1 if len(live) else steps - t + 1), len(live))
        if len(live) == 0:
            break
    unbroken = ~broken
    adversarial[unbroken] = x[unbroken]
    if precision != "fp32":
        broken = wrong_in_fp32(objective, adversarial, labels)
    return broken, adversarial


@torch.no_grad()
def wrong_in_fp32(objective: Objective, adversarial: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """(R,) whether the model in fp32 (defended, where the objective is) gets each row's adversarial image wrong:
    the first iterate that fooled it in bf16, else its last iterate."""
    decided = objective(adversarial).decided if objective.real_forward else None
    if decided is None:
        decided = decisions(objective.model, adversarial)
    return (decided != labels) & (decided != REJECTED)


def report_steps(on_step: Callable[[int, int], None] | None, row_steps: int, left: int) -> None:
    """Tell on_step (if any) that `row_steps` more row-steps are done and `left` rows are still attacked."""
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

    def pass_count(self, settings: AttackSettings) -> int:
        """Passes of one run (each at most steps + 1 row-steps per row), for work estimates made without a model."""
        return self.restarts(settings) * len(self.losses)

    def make_objectives(self, model: Classifier, settings: AttackSettings) -> list[Objective]:
        """What the attack differentiates, in turn: each later objective attacks only what the earlier left."""
        return [self.objective(model)]

    def passes(self, model: Classifier, settings: AttackSettings) -> list[Pass]:
        """The runs in order, each on the rows the earlier ones left: per objective, per restart, per loss."""
        return [Pass(o, loss, r) for o in self.make_objectives(model, settings)
                for r in range(self.restarts(settings)) for loss in self.losses]

    def run(self, model: Classifier, images: torch.Tensor, labels: torch.Tensor, ids: torch.Tensor,
            eps_values: list[float], settings: AttackSettings) -> AttackResult:
        n, k = len(images), len(eps_values)
        eps_all = torch.tensor(eps_values, dtype=images.dtype, device=images.device).repeat(n)  # (N*k,) image-major
        image_of_row = torch.arange(n, device=images.device).repeat_interleave(k)  # (N*k,)
        broken = torch.zeros(n * k, dtype=torch.bool, device=images.device)
        adversarial = images[image_of_row].clone()
        passes = self.passes(model, settings)
        tally = _Tally(settings.progress, n * k * len(passes) * (self.steps(settings) + 1))
        for start in range(0, n * k, settings.batch_size):
            chunk = torch.arange(start, min(start + settings.batch_size, n * k), device=images.device)
            self._attack_chunk(passes, images, labels, ids, image_of_row[chunk], eps_all[chunk], settings,
                               broken, adversarial, chunk, tally)
        return AttackResult(
            broken={e: broken.view(n, k)[:, j] for j, e in enumerate(eps_values)},
            adversarial={e: adversarial.view(n, k, *images.shape[1:])[:, j] for j, e in enumerate(eps_values)},
        )

    def _attack_chunk(self, passes, images, labels, ids, image_rows, eps, settings, broken, adversarial, chunk,
                      tally):
        """Every pass attacks only the rows of this chunk that no earlier pass broke."""
        per_run = len(chunk) * (self.steps(settings) + 1)  # row-steps of one pass over the whole chunk
        for i, run in enumerate(passes):
            alive = ~broken[chunk]
            if not alive.any():
                tally.skip(per_run * (len(passes) - i))
                return
            tally.skip(per_run - int(alive.sum()) * (self.steps(settings) + 1))  # rows an earlier pass broke
            rows, img = chunk[alive], image_rows[alive]
            noise = None
            if self.random_start():
                unique, inverse = img.unique(return_inverse=True)
                # Every PGD-family attack starts from the same points for a seed: only its objective differs.
                noise = start_noise(ids[unique.cpu()], tuple(images.shape[1:]), seed=settings.seed,
                                    stream=run.stream, device=images.device)[inverse]
            targets = ranked_target(run.objective, images[img], labels[img], run.offset) if run.targeted else None
            hit, adv = self.attack_rows(run, images[img], labels[img], eps[alive], noise=noise, targets=targets,
                                        settings=settings, on_step=tally.step)
            broken[rows] = hit
            adversarial[rows] = adv

    def attack_rows(self, run: Pass, images: torch.Tensor, labels: torch.Tensor, eps: torch.Tensor, *,
                    noise: torch.Tensor | None, targets: torch.Tensor | None, settings: AttackSettings,
                    on_step: Callable[[int, int], None]) -> tuple[torch.Tensor, torch.Tensor]:
        """One pass on rows (R, C, H, W) at eps (R,): broken (R,) and adversarial images, as pgd_rows returns them."""
        return pgd_rows(run.objective, images, labels, eps, steps=self.steps(settings),
                        step_size=self.step_sizes(eps, settings), loss=run.loss, noise=noise,
                        early_exit=settings.early_exit, targets=targets, precision=settings.precision, on_step=on_step)


@torch.no_grad()
def ranked_target(objective: Objective, images: torch.Tensor, labels: torch.Tensor, rank: int) -> torch.Tensor:
    """(R,) the class ranked `rank` (1 = runner-up) among the other classes by the objective's logits on the clean
    images (R, C, H, W): a multi-targeted pass tries the likeliest wrong classes first."""
    logits = objective(images).logits.float()  # (R, C)
    others = logits.scatter(1, labels[:, None], float("-inf"))
    return others.argsort(dim=1, descending=True)[:, rank - 1]


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
