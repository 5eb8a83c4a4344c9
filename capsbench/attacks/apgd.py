"""APGD: Croce and Hein, "Reliable evaluation of adversarial robustness with an ensemble of diverse parameter-free
attacks" (arXiv:2003.01690, sec. 3). L-inf sign steps with momentum whose size starts at 2 eps and halves, from the best
point so far, at checkpoints where the loss stopped rising. The model-agnostic attacks every model gets, on its raw
class evidence: untargeted with the margin loss, and targeted DLR (sec. 4) at each of the likeliest other classes in
turn (APGD-T)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from capsbench.attacks.base import AttackSettings
from capsbench.attacks.losses import MIN_CLASSES
from capsbench.attacks.objectives import Objective, RawEvidenceObjective
from capsbench.attacks.pgd import PGD, Pass, iterate_loss, judge_iterate, report_steps, wrong_in_fp32
from capsbench.models import Classifier

MOMENTUM = 0.75  # alpha: x(k+1) = x(k) + alpha (z(k+1) - x(k)) + (1 - alpha) (x(k) - x(k-1))
RHO = 0.75  # condition 1: the step halves when fewer than rho of the steps since the last checkpoint raised the loss


def checkpoints(steps: int) -> list[int]:
    """The iterations w_j = ceil(p_j * steps) < steps at which the step size may halve: p_0 = 0, p_1 = 0.22,
    p_{j+1} = p_j + max(p_j - p_{j-1} - 0.03, 0.06) (sec. 3.2). For 100 steps: 22, 41, 57, 70, 80, 87, 93, 99."""
    marks, before, p = [], 0.0, 0.22
    while (mark := math.ceil(round(p * steps, 6))) < steps:
        if not marks or mark > marks[-1]:
            marks.append(mark)
        before, p = p, round(p + max(p - before - 0.03, 0.06), 6)
    return marks


class StepSize:
    """APGD's step-size control for R rows: eta starts at 2 eps; at each checkpoint w_j a row's eta halves (and the row
    restarts from its best point) when (1) fewer than rho (w_j - w_{j-1}) of its steps since w_{j-1} raised the loss,
    or (2) its eta did not halve at w_{j-1} and its best loss has not risen since (sec. 3.2; as the authors' code,
    (2) is not checked at the first checkpoint)."""

    def __init__(self, eps: torch.Tensor, steps: int) -> None:
        self.eta = 2.0 * eps.float()  # (R,)
        self.marks, self.last_mark = set(checkpoints(steps)), 0
        self.value = torch.full_like(self.eta, -math.inf)  # f at each row's current iterate
        self.best, self.best_at_mark = self.value.clone(), self.value.clone()
        self.rises = torch.zeros_like(self.eta, dtype=torch.long)  # steps that raised f since the last checkpoint
        self.halved_at_mark = torch.ones_like(self.eta, dtype=torch.bool)

    def observe(self, t: int, rows: torch.Tensor, f: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """f (B,) at iterate t of `rows` (B,) (indices into the R rows): (B,) whether f is each row's best so far, and
        the rows whose eta halves now (indices; empty except at a checkpoint). A halved row's current f is its best."""
        self.rises[rows] += (f > self.value[rows]).long()
        self.value[rows] = f
        better = f > self.best[rows]
        self.best[rows[better]] = f[better]
        if t not in self.marks:
            return better, rows[:0]
        oscillating = self.rises[rows] < RHO * (t - self.last_mark)  # condition 1
        stalled = oscillating | (~self.halved_at_mark[rows] & (self.best[rows] <= self.best_at_mark[rows]))  # or (2)
        halve = rows[stalled]
        self.eta[halve] /= 2.0
        self.value[halve] = self.best[halve]
        self.halved_at_mark[rows], self.best_at_mark[rows], self.rises[rows] = stalled, self.best[rows], 0
        self.last_mark = t
        return better, halve


def apgd_rows(
    objective: Objective, images: torch.Tensor, labels: torch.Tensor, eps: torch.Tensor, *, steps: int, loss: str,
    noise: torch.Tensor | None, early_exit: bool = True, targets: torch.Tensor | None = None,
    precision: str = "fp32", on_step: Callable[[int, int], None] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """APGD, one row per (image, eps), with pgd_rows' arguments and results (no step size: StepSize sets it per row).

    The step from x(k) is z = P(x(k) + eta sign(grad f(x(k)))), x(k+1) = P(x(k) + alpha (z - x(k)) + (1 - alpha)
    (x(k) - x(k-1))), alpha = 1 on the first step; P projects onto the eps-ball and [0, 1]; a row whose eta halves
    goes on from its best point and that point's gradient. Every iterate 0..steps is judged by the model's decision;
    a row is broken when any iterate is wrong, and with early_exit it leaves the batch at once.
    """
    rows = torch.arange(len(images), device=images.device)
    shape = (-1,) + (1,) * (images.dim() - 1)
    lower = (images - eps.view(shape)).clamp(min=0.0)
    upper = (images + eps.view(shape)).clamp(max=1.0)
    x = images.clone() if noise is None else torch.min(torch.max(images + noise * eps.view(shape), lower), upper)
    before, grad = x.clone(), torch.zeros_like(x)
    x_best, grad_best = x.clone(), torch.zeros_like(x)
    control = StepSize(eps.to(images.device), steps)
    broken = torch.zeros(len(images), dtype=torch.bool, device=images.device)
    adversarial = x.clone()
    live = rows  # rows still attacked: (indices into the R rows)
    for t in range(steps + 1):
        last = t == steps
        if t > 0:
            here, alpha = x[live], 1.0 if t == 1 else MOMENTUM
            z = torch.min(torch.max(here + control.eta[live].view(shape) * grad[live].sign(), lower[live]), upper[live])
            moved = here + alpha * (z - here) + (1.0 - alpha) * (here - before[live])
            before[live] = here
            x[live] = torch.min(torch.max(moved, lower[live]), upper[live])
        xa = x[live].requires_grad_(not last)
        judged = judge_iterate(objective, xa, labels, live, broken, adversarial, last=last, precision=precision)
        if last:
            report_steps(on_step, len(images), 0)
            break
        f = iterate_loss(judged, loss, labels, targets, live)  # (B,)
        (g,) = torch.autograd.grad(f.sum(), xa)
        grad[live] = g
        better, halve = control.observe(t, live, f.detach().float())
        x_best[live[better]] = xa.detach()[better]
        grad_best[live[better]] = g[better]
        x[halve], grad[halve] = x_best[halve], grad_best[halve]
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


class APGD(PGD):
    """`apgd`: APGD on the raw class evidence, untargeted, with the margin loss max_{j != y} e_j - e_y, from a uniform
    random start, `apgd_restarts` times on the rows still robust. The same for every model: CNN logits; capsules'
    pre-squash norms |s_j|, EM's pre-sigmoid logits, self-routing's class activations (RawEvidenceObjective).
    Untargeted DLR (the paper's APGD-DLR) was weaker on the quick CapsNet: its denominator's gradient cancels the true
    class's where the other classes' evidence is small and alike (results/attack_passes-quick-cpu2.md)."""

    name = "apgd"
    attacks = "the raw class evidence (CNN logits; pre-squash norms, EM's pre-sigmoid logits, class activations)"
    losses = ("margin",)

    def budget(self, settings: AttackSettings) -> str:
        return f"APGD, margin loss, {settings.apgd_steps} steps, {settings.apgd_restarts} restart(s)"

    def steps(self, settings: AttackSettings) -> int:
        return settings.apgd_steps

    def restarts(self, settings: AttackSettings) -> int:
        return settings.apgd_restarts

    def make_objectives(self, model: Classifier, settings: AttackSettings) -> list[Objective]:
        return [RawEvidenceObjective(model)]

    def applies_to(self, model: Classifier, sample: torch.Tensor) -> str | None:
        with torch.no_grad():
            classes = model(sample[:1]).logits.shape[1]
        need = max(MIN_CLASSES.get(loss, 2) for loss in self.losses)
        if classes < need:
            return f"{self.name}'s loss needs at least {need} classes, the model has {classes}"
        return None

    def attack_rows(self, run: Pass, images: torch.Tensor, labels: torch.Tensor, eps: torch.Tensor, *,
                    noise: torch.Tensor | None, targets: torch.Tensor | None, settings: AttackSettings,
                    on_step: Callable[[int, int], None]) -> tuple[torch.Tensor, torch.Tensor]:
        return apgd_rows(run.objective, images, labels, eps, steps=self.steps(settings), loss=run.loss, noise=noise,
                         early_exit=settings.early_exit, targets=targets, precision=settings.precision,
                         on_step=on_step)


class APGDTargeted(APGD):
    """`apgd_targeted`: APGD-T, targeted DLR on the raw class evidence towards each of the `apgd_targets` likeliest
    other classes in turn (ranked by the clean evidence), one random start each, every pass on the rows the earlier
    left robust. A targeted pass reaches images whose runner-up is not the weakest direction."""

    name = "apgd_targeted"
    losses = ("targeted_dlr",)

    def budget(self, settings: AttackSettings) -> str:
        n = self.targets(settings)
        towards = f"each of the {n} other classes" if n == settings.num_classes - 1 else f"the {n} likeliest classes"
        return f"APGD-T (targeted DLR) towards {towards}, {settings.apgd_steps} steps each"

    def targets(self, settings: AttackSettings) -> int:
        others = settings.num_classes - 1
        return others if settings.apgd_targets is None else min(settings.apgd_targets, others)

    def pass_count(self, settings: AttackSettings) -> int:
        return self.targets(settings)

    def passes(self, model: Classifier, settings: AttackSettings) -> list[Pass]:
        raw = self.make_objectives(model, settings)[0]
        return [Pass(raw, "targeted_dlr", 0, rank) for rank in range(1, self.targets(settings) + 1)]
