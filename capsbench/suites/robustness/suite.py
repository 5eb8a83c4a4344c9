"""Robust accuracy under L-inf attacks over an eps grid: attacks reported alone (FGSM, APGD), then an ensemble
in which each attack runs on what the earlier ones left (APGD-T; the capsule-adaptive passes where a model has the
hooks; Square last), the per-image worst case over all of them as the headline, each ensemble attack's marginal
breaks, Wilson intervals on every number, each model's attack budget, and gradient-masking checks per (model, seed)."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from capsbench.attacks import ATTACKS, CATALOG, WORST_CASE, AttackSettings, worst_case_broken
from capsbench.attacks.base import AttackResult, without_unused_heads
from capsbench.attacks.detector import Detector
from capsbench.attacks.pgd import PGD
from capsbench.data import DATASETS, as_images, batches
from capsbench.suites.base import Context, Metric, Suite, test_images
from capsbench.suites.layout import Column, FlagColumn, Group, Layout, SweepColumns, SweepPlot, TableSpec
from capsbench.suites.robustness import detection
from capsbench.suites.robustness.checks import CHECKS, sanity_flags
from capsbench.suites.robustness.params import EpsGrid, eps_grid
from capsbench.train.evaluation import predict
from capsbench.util.progress import Progress, measured
from capsbench.util.stats import accuracy_fields
from capsbench.util.style import STYLE

FLAG_SYMBOLS = {"eps0_equals_clean": "0", "pgd_not_weaker_than_fgsm": "F", "monotone_in_eps": "M",
                "blackbox_not_stronger": "B", "near_zero_at_max_eps": "Z", "adaptive_stronger": "A"}
ATTACK_ORDER = (
    "worst_case",
    "pgd_detect_aware",
    "apgd",
    "apgd_targeted",
    "pgd_adaptive",
    "vote",
    "pgd",
    "fgsm",
    "square",
    "autoattack",
)  # the ensemble's order, the standard attacks after it
ATTACKS_SHOWN = Group(
    "attack",
    ATTACK_ORDER,
    {
        "worst_case": "worst case",
        "pgd_detect_aware": "PGD detection-aware",
        "apgd": "APGD",
        "apgd_targeted": "APGD-T",
        "pgd_adaptive": "PGD adaptive",
        "vote": "Vote",
        "pgd": "PGD",
        "fgsm": "FGSM",
        "square": "Square",
        "autoattack": "AutoAttack",
    },
)
EPS_COLUMNS = SweepColumns("robust_accuracy", "eps", "robust accuracy ({unit}) at eps", drop=(0.0,))  # eps 0 = clean


APGD_PASSES = ("apgd", "apgd_targeted")  # the attacks whose steps are apgd_steps (long_apgd_steps at large eps)


def settings_at(params: Any, base: AttackSettings, eps: float) -> AttackSettings:
    """The attack settings at `eps`: APGD's passes run params.long_apgd_steps at eps >= params.long_eps, where the
    few images left robust are the ones a short schedule leaves too early."""
    if params.long_apgd_steps is None or eps < params.long_eps:
        return base
    return replace(base, apgd_steps=params.long_apgd_steps)


def settings(params: Any, num_classes: int) -> AttackSettings:
    """The attack settings of the suite's params for a dataset of `num_classes` classes."""
    return AttackSettings(
        steps=params.pgd_steps,
        step_ratio=params.pgd_step_ratio,
        restarts=params.pgd_restarts,
        square_queries=params.square_queries,
        num_classes=num_classes,
        seed=params.attack_seed,
        batch_size=params.batch_size,
        early_exit=params.early_exit,
        targets=params.pgd_targets,
        apgd_steps=params.apgd_steps,
        apgd_restarts=params.apgd_restarts,
        apgd_targets=params.apgd_targets,
        precision=params.attack_precision,
    )


class RobustnessSuite(Suite):
    """Robust accuracy per (attack, eps) on the test split; an image counts only if it is classified correctly both
    clean and under attack. The attacked decision is the classifier's argmax over its class scores. Every attack in
    params.attacks runs on every image classified correctly clean (it is reported on its own); then each attack of
    params.ensemble and params.extra_attacks in turn, eps by eps from the smallest, on the images every attack before
    it left robust at this and every smaller eps (its marginal breaks are reported); `worst_case` is the per-image
    union over all attacks and smaller eps. Every model gets the same attacks; one that does not apply to a model
    (the capsule-adaptive ones on a CNN) is skipped with its reason, and the notes state each model's budget."""

    description = (
        "robust accuracy under L-inf FGSM / APGD, an ensemble (APGD-T, capsule-adaptive, Square) on what they leave, "
        "worst case, each model's budget, masking checks"
    )
    metrics = (
        Metric("clean_accuracy", "%", True, "accuracy on the attacked test images, unperturbed"),
        Metric("robust_accuracy", "%", True, "share of test images classified correctly both clean and under attack"),
        Metric(
            "marginal_breaks",
            "%",
            None,
            "share of test images an ensemble attack broke that every attack before it left robust at this and every "
            "smaller eps (the attack runs on those images only)",
        ),
        Metric(
            "attack_skipped",
            "count",
            None,
            "1: the attack in column `attack` does not apply to this model (see `reason`)",
        ),
        Metric("sanity_flags", "count", None, "gradient-masking checks that fired for this (model, seed)"),
        Metric("sanity_flag", "fired", None, "1 if the check in column `check` fired, else 0"),
        Metric("attack_throughput", "images/s", True, "images x eps attacked per second, over the eps > 0 runs"),
        Metric(
            "correct_or_detected",
            "%",
            True,
            "detection on: test images classified correctly under attack or "
            "flagged by the reconstruction detector (clean mistakes count only if flagged)",
            contains=("robust_accuracy",),
        ),
        Metric(
            "detection_rate",
            "%",
            True,
            "detection on: share of the images an attack broke whose adversarial image the detector flags",
        ),
        Metric("detection_false_positive_rate", "%", False, "detection on: clean test images the detector flags"),
        Metric(
            "detection_threshold",
            "distance",
            None,
            "detection on: reconstruction distance above which an input "
            "is flagged, set on clean validation images at params.detection_fpr",
        ),
    )
    sweep_columns = ("attack", "eps", "check")
    detail_columns = ("reason",)
    layout = Layout(
        tables=(
            TableSpec(
                "worst_case",
                "Robust accuracy under the per-image worst case over all attacks (L-inf)",
                (
                    Column("clean_accuracy", "clean"),
                    replace(EPS_COLUMNS, where={"attack": WORST_CASE}),
                    FlagColumn("sanity_flag", "check", FLAG_SYMBOLS, CHECKS),
                ),
            ),
            TableSpec(
                "attacks",
                "Robust accuracy per attack (L-inf)",
                (replace(EPS_COLUMNS, compare=False),),  # no attack alone is the worst case: nothing bold here
                blocks=ATTACKS_SHOWN,
                drop={"attack": (WORST_CASE,)},
            ),
            TableSpec(
                "ensemble",
                "Test images each ensemble attack broke that every attack before it left robust (L-inf)",
                (SweepColumns("marginal_breaks", "eps", "newly broken ({unit}) at eps", drop=(0.0,), compare=False),),
                blocks=ATTACKS_SHOWN,
            ),
            TableSpec(
                "detection",
                "Correct or flagged by the reconstruction detector under attack (L-inf)",
                (
                    Column("detection_false_positive_rate", "clean flagged"),
                    SweepColumns("correct_or_detected", "eps", "correct or detected ({unit}) at eps"),
                ),
                blocks=ATTACKS_SHOWN,
            ),
        ),
        figures=(
            SweepPlot(
                "worst_case_vs_eps",
                ("robust_accuracy",),
                "eps",
                keep={"attack": (WORST_CASE,)},
                xlabel="eps (L-inf, pixels in [0, 1])",
                ylabels=("worst-case robust accuracy (%)",),
            ),
            SweepPlot(
                "robust_accuracy_vs_eps",
                ("robust_accuracy",),
                "eps",
                facet=ATTACKS_SHOWN,
                drop={"attack": ("square",)},
                xlabel="eps",
                ylabels=("robust accuracy (%)",),
            ),
        ),
    )

    def prepare(self, cfg: Any, splits: Any) -> EpsGrid:
        """The dataset's eps grid, worked out once for every model and seed of the run (ctx.resources)."""
        return eps_grid(cfg.params, cfg.dataset)

    def work(self, cfg: Any) -> float:
        """Image passes of every attack at most (early exit stops sooner): a PGD-family attack costs a forward and a
        backward pass per step, restart and loss at each eps; a torchattacks attack one pass per query."""
        grid = eps_grid(cfg.params, cfg.dataset)
        passes = attack_passes(cfg.params, grid.eps, DATASETS.get(cfg.dataset).num_classes)
        return test_images(cfg) * (1 + sum(passes.values()))

    def measure(self, ctx: Context) -> list[dict[str, Any]]:
        p, x, y = ctx.params, ctx.splits.test_x, ctx.splits.test_y
        grid, bb = ctx.resources.eps, ctx.resources.blackbox
        with without_unused_heads(ctx.model):  # the decision reads no reconstruction
            clean_ok = predict(ctx.model, x, y, batch_size=p.batch_size, device=ctx.device) == y  # (N,)
        records: list[dict[str, Any]] = [{"metric": "clean_accuracy", **accuracy_fields(clean_ok.numpy())}]
        n_attacks = len(_order(p))
        credit = _Credit(len(y), attack_passes(p, grid, ctx.splits.spec.num_classes))
        with Progress(f"attacks {ctx.model_name} s{ctx.seed}", None, unit="row-step", count="row-steps") as bar:
            run = _AttackRun(ctx, clean_ok, replace(settings(p, ctx.splits.spec.num_classes),
                                                    progress=_follow(bar, credit)))
            if p.detection_fpr is not None:
                run.detector, skipped = detection.fit(ctx, run)
                records += skipped
            for i, name in enumerate(p.attacks, 1):
                eps_values = grid if CATALOG.get(name).white_box else [bb]
                bar.reset(None)  # each attack's work is counted (and timed) on its own, from its first step
                bar.note(f"{i}/{n_attacks} {name} on {int(clean_ok.sum())} images x {len(eps_values)} eps")
                credit.start(name)
                records += run.standalone(name, eps_values)
            # With a detector every attack sees every image: one that an earlier attack broke but the detector flags
            # is not broken for the defended model, so the later attacks must still try it.
            chain = run.standalone if run.detector is not None else run.worst_case_only
            for i, name in enumerate(_order(p)[len(p.attacks):], len(p.attacks) + 1):
                bar.reset(None)
                if run.applies(name):  # an attack that does not apply to the model is recorded, never announced
                    bar.note(f"{i}/{n_attacks} {name} on " + ("every image" if run.detector else "what is left robust"))
                credit.start(name)
                records += chain(name, grid if CATALOG.get(name).white_box else [bb])
            if run.detector is not None:
                bar.reset(None)
                bar.note("detection-aware PGD")
                detected = detection.detection_records(ctx, run, run.detector, grid)
        worst = worst_case_broken(run.broken, grid, len(y))
        records += [
            {
                "metric": "robust_accuracy",
                "attack": WORST_CASE,
                "eps": eps,
                **accuracy_fields((clean_ok & ~worst[eps]).numpy()),
            }
            for eps in grid
        ]
        if run.detector is not None:
            records += detected
        records += [
            {"metric": "attack_throughput", "value": run.rows[a] / s, "attack": a}
            for a, s in run.seconds.items()
            if s > 0 and run.rows[a] > 0
        ]
        flags = sanity_flags(records, near_zero=p.near_zero)
        records += [{"metric": "sanity_flag", "value": float(f.fired), "check": f.check} for f in flags]
        records.append({"metric": "sanity_flags", "value": float(sum(f.fired for f in flags))})
        return records

    def notes(self, records: list[dict[str, Any]], params: Any) -> list[str]:
        """One line per fired sanity flag and per skipped attack (model, seed, what was seen), or one line saying
        that every check passed; then each model's attack budget in one line."""
        groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
        for r in records:
            groups[(r["model"], r["dataset"], r["seed"])].append(r)
        lines = [
            f"FLAG {model} / {dataset} seed {seed}: {f.check} ({CHECKS[f.check]}): {f.detail}"
            for (model, dataset, seed), rows in groups.items()
            for f in sanity_flags(rows, near_zero=params.near_zero)
            if f.fired
        ] or [f"sanity checks passed for every model and seed: {', '.join(CHECKS)}"]
        skipped = {(r["model"], r["attack"], r["reason"]) for r in records if r["metric"] == "attack_skipped"}
        lines += [f"{attack} not run on {model}: {reason}" for model, attack, reason in sorted(skipped)]
        return lines + budget_lines(records, params)

    def figures(self, ctx: Context) -> dict[str, Figure]:
        """APGD adversarial examples of the first test images at every eps, titled by the model's decision."""
        p, n, grid = ctx.params, ctx.params.examples, ctx.resources.eps
        images, labels = next(batches(ctx.splits.test_x[:n], ctx.splits.test_y[:n], n, device=ctx.device))
        result = ATTACKS.get("apgd").run(
            ctx.model, images, labels, torch.arange(n), grid, settings(p, ctx.splits.spec.num_classes)
        )
        with plt.rc_context(STYLE):
            fig, axes = plt.subplots(len(grid), n, figsize=(0.9 * n, 1.0 * len(grid)), squeeze=False)
            for row, eps in enumerate(grid):
                adv = result.adversarial[eps]
                preds = predict(ctx.model, adv, labels, batch_size=n, device=ctx.device)
                for col, ax in enumerate(axes[row]):
                    ax.imshow(adv[col].detach().cpu().permute(1, 2, 0).squeeze(-1), cmap="gray", vmin=0, vmax=1)
                    ok = preds[col].item() == labels[col].item()
                    ax.set_title(f"{preds[col].item()}", fontsize=7, color="black" if ok else "red")
                    ax.set_xticks([])
                    ax.set_yticks([])
                axes[row][0].set_ylabel(f"eps={eps:g}", fontsize=7)
            fig.suptitle(f"{ctx.model_name}: decisions under APGD ({p.apgd_steps} steps, margin loss; red = wrong)",
                         fontsize=8)
            fig.tight_layout()
        return {"adversarial_examples": fig}


def _order(params: Any) -> list[str]:
    """Every attack in the order it runs: those reported alone, then the ensemble, then the extra attacks."""
    return [*params.attacks, *params.ensemble, *params.extra_attacks]


def budget_lines(records: list[dict[str, Any]], params: Any) -> list[str]:
    """Per (model, dataset): the attacks that ran on it, in the order they ran, each with its budget (steps,
    restarts, targets, queries) under `params`."""
    ran: dict[tuple[str, str], set[str]] = defaultdict(set)
    for r in records:
        if r["metric"] in ("robust_accuracy", "marginal_breaks") and r["attack"] in CATALOG:
            ran[(r["model"], r["dataset"])].add(r["attack"])
    order = [*_order(params), *ATTACK_ORDER]
    lines = []
    for (model, dataset), attacks in ran.items():
        if dataset not in DATASETS:  # records made by hand (no class count to state the targets by)
            continue
        s = settings(params, DATASETS.get(dataset).num_classes)
        longer = (f"; {params.long_apgd_steps} steps at eps >= {params.long_eps:g}"
                  if params.long_apgd_steps is not None else "")
        got = [f"{a} ({ATTACKS.get(a).budget(s)}{longer if a in APGD_PASSES else ''})"
               for a in sorted(attacks, key=order.index)]
        lines.append(f"budget on {model} / {dataset}: " + "; ".join(got))
    return lines


def attack_passes(params: Any, grid: list[float], num_classes: int) -> dict[str, float]:
    """The declared image passes per test image of each attack of `params` over the eps values of `grid`: a PGD-family
    attack a forward and a backward pass per step, restart and loss at each eps (at that eps's schedule); a
    torchattacks attack one pass per query (at each eps when white-box)."""
    base = settings(params, num_classes)
    out = {}
    for name in _order(params):
        attack = ATTACKS.get(name)
        if isinstance(attack, PGD):
            out[name] = float(sum(2 * (attack.steps(s) + 1) * attack.pass_count(s)
                                  for s in (settings_at(params, base, e) for e in grid)))
        else:
            out[name] = float(attack.queries(base) * (len(grid) if CATALOG.get(name).white_box else 1))
    return out


class _Credit:
    """The unit's measuring done so far in its declared passes (the clean pass, the attacks finished, the share of the
    one under way), told to capsbench.util.progress.measured as the attacks move."""

    def __init__(self, images: int, passes: dict[str, float]) -> None:
        self.images, self.passes, self.finished, self.current = images, passes, 1.0, ""
        measured(images * self.finished)

    def start(self, name: str) -> None:
        self.finished += self.passes.get(self.current, 0.0)
        self.current = name
        measured(self.images * self.finished)

    def __call__(self, share: float) -> None:
        measured(self.images * (self.finished + self.passes.get(self.current, 0.0) * min(1.0, share)))


def _follow(bar: Progress, credit: Callable[[float], None]) -> Callable[[int, int, int], None]:
    """AttackSettings.progress for the attacks' bar: each run of an attack starts the bar afresh (its own total and
    clock); every step of a batch of rows (or batch of images) moves it, shows the rows left and credits the unit's
    work."""

    def follow(done: int, total: int, left: int) -> None:
        if total != bar.total or done < bar.done:
            bar.reset(total)
        bar.update(done - bar.done)
        bar.show(f"{left:,} rows left")
        credit(done / total if total else 1.0)

    return follow


class _AttackRun:
    """The attacks of one (model, seed): per attack and eps which test images it broke, and what it cost."""

    def __init__(self, ctx: Context, clean_ok: torch.Tensor, attack_settings: AttackSettings) -> None:
        self.ctx, self.clean_ok, self.settings = ctx, clean_ok, attack_settings
        self.broken: dict[str, dict[float, torch.Tensor]] = {}
        self.detector: Detector | None = None  # when set, each attack's adversarial images are also checked by it
        self.flagged: dict[str, dict[float, torch.Tensor]] = {}  # per attack and eps: adversarial image flagged
        self.alone: list[str] = []  # the attacks run on every clean-correct image, reported on their own
        self.seconds: dict[str, float] = defaultdict(float)
        self.rows: dict[str, int] = defaultdict(int)
        self.sample = as_images(ctx.splits.test_x[:1], ctx.device)

    def applies(self, name: str) -> bool:
        """Whether attack `name` is defined for this model (else its records say why it did not run)."""
        return self.why_not(name) is None

    def why_not(self, name: str) -> str | None:
        """Why attack `name` does not apply to this model (None: it does), probed without the decoder."""
        with without_unused_heads(self.ctx.model):
            return ATTACKS.get(name).applies_to(self.ctx.model, self.sample)

    def standalone(self, name: str, eps_values: list[float]) -> list[dict[str, Any]]:
        """Run `name` on every image classified correctly clean; robust-accuracy records per eps (or a skip record)."""
        reason = self.why_not(name)
        if reason is not None:
            return [{"metric": "attack_skipped", "value": 1.0, "attack": name, "reason": reason}]
        self.alone.append(name)
        broken = self._attack(name, self.clean_ok, eps_values)
        return [
            {
                "metric": "robust_accuracy",
                "attack": name,
                "eps": eps,
                **accuracy_fields((self.clean_ok & ~mask).numpy()),
            }
            for eps, mask in broken.items()
        ]

    def worst_case_only(self, name: str, eps_values: list[float]) -> list[dict[str, Any]]:
        """Run `name` at each eps (ascending) only on the images every attack so far, at this and smaller eps, left
        robust: it can only lower the worst case, so nothing else needs attacking. Its records: per eps, the images
        it broke that were robust before it (marginal breaks)."""
        reason = self.why_not(name)
        if reason is not None:
            return [{"metric": "attack_skipped", "value": 1.0, "attack": name, "reason": reason}]
        positive = sorted(e for e in eps_values if e > 0)
        before = worst_case_broken(self.broken, positive, len(self.clean_ok))
        for eps in positive:
            robust = self.clean_ok & ~worst_case_broken(self.broken, [eps], len(self.clean_ok))[eps]
            self._attack(name, robust, [eps])
        after = worst_case_broken(self.broken, positive, len(self.clean_ok))
        return [{"metric": "marginal_breaks", "attack": name, "eps": eps,
                 **accuracy_fields((after[eps] & ~before[eps]).numpy())} for eps in positive]

    def attack_quietly(self, name: str, candidates: torch.Tensor, eps_values: list[float]) -> dict[float, torch.Tensor]:
        """Run `name` on the candidate images: which it broke per eps, kept out of the worst case (and unchecked by
        the detector); its cost is counted."""
        return self._attack(name, candidates, eps_values, keep=False)

    def _attack(
        self, name: str, candidates: torch.Tensor, eps_values: list[float], *, keep: bool = True
    ) -> dict[float, torch.Tensor]:
        ids = candidates.nonzero().squeeze(1)  # (M,) test-set indices of the images to attack
        images, y = as_images(self.ctx.splits.test_x[ids], self.ctx.device), self.ctx.splits.test_y[ids]
        start = time.perf_counter()
        result = None
        if len(ids):
            result = AttackResult({}, {})
            groups: dict[AttackSettings, list[float]] = defaultdict(list)  # eps values that share a schedule
            for eps in eps_values:
                groups[settings_at(self.ctx.params, self.settings, eps)].append(eps)
            for schedule, values in groups.items():
                part = self._run(name, images, y.to(self.ctx.device), ids, values, schedule)
                result.broken.update(part.broken)
                result.adversarial.update(part.adversarial)
        self.seconds[name] += time.perf_counter() - start
        self.rows[name] += len(ids) * sum(e > 0 for e in eps_values)
        out = {}
        for eps in eps_values:
            mask = torch.zeros(len(self.clean_ok), dtype=torch.bool)
            if result is not None:
                mask[ids] = result.broken[eps].cpu()
            out[eps] = mask
            if not keep:
                continue
            _merge(self.broken, name, eps, mask)
            if self.detector is not None:
                flags = torch.zeros_like(mask)
                if result is not None:
                    flags[ids] = self.detector.flags(
                        self.ctx.model, result.adversarial[eps], batch_size=self.settings.batch_size
                    )
                _merge(self.flagged, name, eps, flags & mask)  # flagged where it broke the image
        return out


    def _run(self, name: str, images: torch.Tensor, y: torch.Tensor, ids: torch.Tensor, eps_values: list[float],
             schedule: AttackSettings) -> AttackResult:
        """One attack on the model; every attack but the detection-aware one, which reads the reconstruction, runs
        without the reconstruction decoder (no attack's decision reads it)."""
        attack = ATTACKS.get(name)
        if CATALOG.get(name).defended:
            return attack.run(self.ctx.model, images, y, ids, eps_values, schedule)
        with without_unused_heads(self.ctx.model):
            return attack.run(self.ctx.model, images, y, ids, eps_values, schedule)


def _merge(store: dict[str, dict[float, torch.Tensor]], name: str, eps: float, mask: torch.Tensor) -> None:
    """OR `mask` into store[name][eps] (an attack may run several times, e.g. at each eps on what is left)."""
    per_eps = store.setdefault(name, {})
    per_eps[eps] = per_eps.get(eps, torch.zeros_like(mask)) | mask
