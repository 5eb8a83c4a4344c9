"""Robust accuracy under L-inf attacks (FGSM, PGD on cross-entropy and margin, Square, opt-in AutoAttack)
over an epsilon grid, with gradient-masking sanity flags recorded for every (model, seed)."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import matplotlib.pyplot as plt
import torch
from matplotlib.figure import Figure

from capsbench.attacks import BLACK_BOX, AttackSettings, attack_target, build_attack, restarts_for, worst_case
from capsbench.data import batches
from capsbench.evaluation import predict
from capsbench.plots import STYLE, SweepPlot
from capsbench.suites.base import Context, Metric, Suite
from capsbench.suites.robustness_checks import CHECKS, sanity_flags
from capsbench.suites.robustness_params import RobustnessParams
from capsbench.suites.robustness_params import eps_grid as _grid


class RobustnessSuite(Suite):
    """Robust accuracy per (attack, eps) on the test split; an image counts only if it is classified correctly
    both clean and attacked. The attacked decision is the classifier's argmax over its class scores."""

    name = "robustness"
    description = "robust accuracy under L-inf FGSM / PGD (CE, margin) / Square over an eps grid, with masking checks"
    metrics = (
        Metric("clean_accuracy", "%", True, "accuracy on the attacked test images, unperturbed"),
        Metric("robust_accuracy", "%", True, "share of test images classified correctly both clean and under attack"),
        Metric("sanity_flags", "count", False, "gradient-masking checks that fired for this (model, seed)"),
        Metric("sanity_flag", "fired", False, "1 if the check in column `check` fired, else 0"),
        Metric("attack_throughput", "images/s", True, "images attacked per second, over the eps > 0 runs"),
    )
    sweep_columns = ("attack", "eps", "check")
    table_metrics = ("clean_accuracy", "robust_accuracy", "sanity_flags")
    plots = (SweepPlot("robust_accuracy_vs_eps", "robust_accuracy", "eps", facet="attack", ylabel="robust accuracy [%]"),)
    Params = RobustnessParams

    def _settings(self, ctx: Context) -> AttackSettings:
        p = ctx.params
        return AttackSettings(
            steps=p.pgd_steps, step_ratio=p.pgd_step_ratio, restarts=p.pgd_restarts, square_queries=p.square_queries,
            num_classes=ctx.splits.spec.num_classes, seed=p.attack_seed,
        )

    def _plan(self, ctx: Context) -> list[tuple[str, float]]:
        grid, bb = _grid(ctx.params, ctx.splits.name)
        return [(a, e) for a in ctx.params.attacks for e in ([bb] if a in BLACK_BOX else grid)]

    def measure(self, ctx: Context) -> list[dict[str, Any]]:
        p, x, y = ctx.params, ctx.splits.test_x, ctx.splits.test_y
        clean_ok = predict(ctx.model, x, y, batch_size=p.batch_size, device=ctx.device) == y
        records: list[dict[str, Any]] = [{"metric": "clean_accuracy", "value": 100.0 * clean_ok.sum().item() / len(y)}]
        target, settings = attack_target(ctx.model), self._settings(ctx)
        seconds: dict[str, float] = defaultdict(float)
        attacked: dict[str, int] = defaultdict(int)
        for i, (name, eps) in enumerate(self._plan(ctx)):
            torch.manual_seed(p.attack_seed * 1_000_003 + i)  # PGD's random start draws from the global RNG
            start = time.perf_counter()
            adv = torch.cat([
                worst_case(build_attack(name, target, eps=eps, settings=settings), ctx.model, images, labels,
                           restarts=restarts_for(name, settings)).cpu()
                for images, labels in batches(x, y, p.batch_size, device=ctx.device)
            ])
            if eps > 0:
                seconds[name] += time.perf_counter() - start
                attacked[name] += len(y)
            # Same batching and prediction path as the clean images: at eps=0 the two must agree exactly.
            adv_ok = predict(ctx.model, adv, y, batch_size=p.batch_size, device=ctx.device) == y
            robust = (clean_ok & adv_ok).sum().item()
            records.append({"metric": "robust_accuracy", "value": 100.0 * robust / len(y), "attack": name, "eps": eps})
        records += [
            {"metric": "attack_throughput", "value": attacked[a] / seconds[a], "attack": a} for a in seconds if seconds[a] > 0
        ]
        flags = sanity_flags(records, near_zero=p.near_zero)
        records += [{"metric": "sanity_flag", "value": float(f.fired), "check": f.check} for f in flags]
        records.append({"metric": "sanity_flags", "value": float(sum(f.fired for f in flags))})
        return records

    def notes(self, records: list[dict[str, Any]], params: Any) -> list[str]:
        """One line per fired sanity flag (model, seed, what was seen), or one line saying none fired."""
        groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
        for r in records:
            groups[(r["model"], r["dataset"], r["seed"])].append(r)
        fired = [
            f"FLAG {model} / {dataset} seed {seed}: {f.check} ({CHECKS[f.check]}): {f.detail}"
            for (model, dataset, seed), rows in groups.items()
            for f in sanity_flags(rows, near_zero=params.near_zero) if f.fired
        ]
        checked = ", ".join(CHECKS)
        return fired or [f"sanity checks passed for every model and seed: {checked}"]

    def figures(self, ctx: Context) -> dict[str, Figure]:
        """PGD (cross-entropy) adversarial examples of the first test images at every eps, titled by the decision."""
        p, n = ctx.params, ctx.params.examples
        grid, _ = _grid(p, ctx.splits.name)
        images, labels = next(batches(ctx.splits.test_x[:n], ctx.splits.test_y[:n], n, device=ctx.device))
        target, settings = attack_target(ctx.model), self._settings(ctx)
        with plt.rc_context(STYLE):
            fig, axes = plt.subplots(len(grid), n, figsize=(0.9 * n, 1.0 * len(grid)), squeeze=False)
            for row, eps in enumerate(grid):
                torch.manual_seed(p.attack_seed)
                adv = build_attack("pgd", target, eps=eps, settings=settings)(images, labels)
                preds = predict(ctx.model, adv, labels, batch_size=n, device=ctx.device)
                for col, ax in enumerate(axes[row]):
                    ax.imshow(adv[col].detach().cpu().permute(1, 2, 0).squeeze(-1), cmap="gray", vmin=0, vmax=1)
                    ok = preds[col].item() == labels[col].item()
                    ax.set_title(f"{preds[col].item()}", fontsize=7, color="black" if ok else "red")
                    ax.set_xticks([])
                    ax.set_yticks([])
                axes[row][0].set_ylabel(f"eps={eps:g}", fontsize=7)
            fig.suptitle(f"{ctx.model_name}: PGD-{p.pgd_steps} decisions (red = wrong)", fontsize=8)
            fig.tight_layout()
        return {"adversarial_examples": fig}
