"""Robust accuracy under L-inf attacks over an eps grid: attacks reported alone (FGSM, APGD), then an ensemble
in which each attack runs on what the earlier ones left (APGD-T; the capsule-adaptive passes where a model has the
hooks; Square last), the per-image worst case over all of them as the headline, each ensemble attack's marginal
breaks, Wilson intervals on every number, each model's attack budget, and gradient-masking checks per (model, seed)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure

from capsbench.attacks import CATALOG, WORST_CASE, build, table_order, worst_case_broken
from capsbench.attacks.base import without_unused_heads
from capsbench.data import DATASETS, batches
from capsbench.suites.base import Context, Metric, Suite, test_images
from capsbench.suites.robustness import detection
from capsbench.suites.robustness.checks import CHECKS, sanity_flags
from capsbench.suites.robustness.minimal import minimal_records
from capsbench.suites.robustness.params import EpsGrid, eps_grid
from capsbench.suites.robustness.phases import (
    UnitAttacks,
    UnitWork,
    attack_images,
    credit_unit,
    engine_settings,
    follow_bar,
    follow_images,
    planned,
)
from capsbench.suites.robustness.tables import robustness_layout
from capsbench.train.evaluation import predict
from capsbench.util.progress import Progress
from capsbench.util.stats import accuracy_fields
from capsbench.util.style import STYLE

THREAT = {"linf": "L-inf on [0, 1] pixels (normalisation inside the model)",
          "l2": "L2 on [0, 1] pixels (normalisation inside the model)"}
EXAMPLES_BY = "apgd"  # the attack whose adversarial examples the figure shows
EVAL_BATCH = 500  # images per forward pass of the clean predictions, unless params.batch_size says otherwise
FIXED_EPS = "fixed_eps"  # the unit's phase of fixed-eps attacks, beside its minimum-norm attacks (UnitWork)


class RobustnessSuite(Suite):
    """Robust accuracy per (attack, eps) on the test split; an image counts only if it is classified correctly both
    clean and under attack. The attacked decision is the classifier's argmax over its class scores. Every attack in
    params.attacks runs on every image classified correctly clean (it is reported on its own); then each attack of
    params.ensemble and params.extra_attacks in turn, eps by eps from the smallest, on the images every attack before
    it left robust at this and every smaller eps (its marginal breaks are reported); `worst_case` is the per-image
    union over all attacks and smaller eps. Every model gets the same attacks; one that does not apply to a model
    (the capsule-adaptive ones on a CNN) is skipped with its reason, and the notes state each model's budget."""

    NORM = "linf"  # the threat model: eps-boxes in L-inf (RobustnessL2Suite: balls in L2)
    description = (
        "robust accuracy under L-inf attacks reported alone (params.attacks), an ensemble on what they leave "
        "(params.ensemble), the per-image worst case, each model's budget, masking checks"
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
        Metric("minimal_distance", "eps", True, "each image's smallest adversarial perturbation (params.minimal): the "
               "median over the test images (clean mistakes 0; inf where nothing was found) with its distribution-free "
               "95 % interval; `attack`: the per-image minimum over the minimum-norm attacks and the fixed-eps bound "
               "(worst_case), or one attack's own"),
        Metric("minimal_accuracy", "%", True, "share of test images whose smallest perturbation exceeds eps: the "
               "robustness curve, at every radius up to the grid's largest"),
        Metric("minimal_found", "%", None, "share of test images whose smallest perturbation the attack in column "
               "`attack` found (fixed_eps: the fixed-eps attacks' bound was smaller than every minimum-norm attack's)"),
        Metric("minimal_too_weak", "count", None, "images the fixed-eps attacks broke at an eps below which no "
                                                   "minimum-norm attack found a perturbation (beyond 2 %)"),
        Metric("sanity_flag", "fired", None, "1 if the check in column `check` fired, else 0"),
        Metric("attack_throughput", "images/s", True, "images x eps attacked per second, over the eps > 0 runs, per "
               "phase (the row engine's pool of row attacks, or a query attack)"),
        Metric("attack_iterates", "count", None, "iterates of the row engine over the unit (each forwards the pool)"),
        Metric("attack_forward_calls", "count", None, "model forward calls of the row engine over the unit"),
        Metric("attack_host_reads", "count", None, "reads of the device by the row engine over the unit (its only "
               "host synchronisations)"),
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
    layout = robustness_layout("L-inf")

    def prepare(self, cfg: Any, splits: Any) -> EpsGrid:
        """The dataset's eps grid, worked out once for every model and seed of the run (ctx.resources)."""
        return eps_grid(cfg.params, cfg.dataset)

    def work(self, cfg: Any) -> float:
        """Image passes of every attack at most (early exit and the ensemble's skips stop sooner): each attack's
        declared cost per image at each of its eps, and the clean pass."""
        grid = eps_grid(cfg.params, cfg.dataset)
        return test_images(cfg) * (1 + attack_passes(cfg.params, grid, DATASETS.get(cfg.dataset).num_classes,
                                                     self.NORM))

    def work_kind(self, cfg: Any) -> str:
        """Minimum-norm attacks run their declared passes in full, where early exit cuts the fixed-eps attacks' to a
        fraction: a unit with them has a speed of its own ("<suite>+minimal")."""
        return f"{self.name}+minimal" if cfg.params.minimal else self.name

    def measure(self, ctx: Context) -> list[dict[str, Any]]:
        p, y = ctx.params, ctx.splits.test_y
        grid, bb = ctx.resources.eps, ctx.resources.blackbox
        images, labels = attack_images(ctx)
        with without_unused_heads(ctx.model):  # the decision reads no reconstruction
            clean_ok = (predict(ctx.model, ctx.splits.test_x, y, batch_size=p.batch_size or EVAL_BATCH,
                                device=ctx.device) == y).numpy()  # (N,)
        records: list[dict[str, Any]] = [{"metric": "clean_accuracy", **accuracy_fields(clean_ok)}]
        num_classes = ctx.splits.spec.num_classes
        with Progress(f"attacks {ctx.model_name} s{ctx.seed}", None, unit="row-step", count="row-steps") as bar:
            settings = replace(engine_settings(p, num_classes, ctx.device, ctx.model, images[:1], self.NORM),
                               progress=follow_bar(bar))
            run = UnitAttacks(ctx.model, images, labels, clean_ok, grid, settings, dict(p.attack_args),
                              keep={EXAMPLES_BY: np.arange(min(p.examples, len(y)))})
            detector = None
            if p.detection_fpr is not None:
                detector, skipped = detection.fit(ctx, run)
                records += skipped
            order = planned(p, grid, bb, everyone_alone=detector is not None)
            if detector is not None:  # every adversarial image goes to the detector
                run.keep = {a.name: np.arange(len(y)) for a in order}
            fixed = fixed_eps_passes(p, ctx.resources, num_classes, self.NORM)
            by_minimal = {a: m * len(y) for a, m in minimal_passes(p, num_classes, self.NORM).items()}
            work = UnitWork({FIXED_EPS: fixed * len(y), **by_minimal},
                            credit_unit(len(y), fixed + sum(by_minimal.values()) / len(y)))
            run.run(order, work=work.phase(FIXED_EPS))
            if detector is not None:
                bar.note("detection-aware PGD")
                detected = detection.detection_records(ctx, run, detector, grid)
        for a in order:
            if a.name in run.skipped:
                records.append({"metric": "attack_skipped", "value": 1.0, "attack": a.name,
                                "reason": run.skipped[a.name]})
            elif a.alone:
                records += [{"metric": "robust_accuracy", "attack": a.name, "eps": e,
                             **accuracy_fields(clean_ok & ~run.broken[a.name][e])} for e in a.eps]
        records += marginal_records(run.broken, [a.name for a in order if not a.alone])
        worst = worst_case_broken(run.broken, grid, len(y))
        records += [{"metric": "robust_accuracy", "attack": WORST_CASE, "eps": eps,
                     **accuracy_fields(clean_ok & ~worst[eps])} for eps in grid]
        if p.minimal:  # credited batch by batch, after the fixed-eps attacks
            with Progress(f"minimal {ctx.model_name} s{ctx.seed}", None, unit="image", count="images") as bar:
                records += minimal_records(run, list(p.minimal), worst, grid, progress=lambda name: follow_images(
                    bar, CATALOG.get(name).label,
                    lambda share: work.phase(name)(share * by_minimal[name], by_minimal[name])))
        if detector is not None:
            records += detected
        records += [{"metric": "attack_throughput", "value": run.rows[a] / s, "attack": a}
                    for a, s in run.seconds.items() if s > 0 and run.rows.get(a)]
        records += [{"metric": "attack_iterates", "value": float(run.counts.iterates)},
                    {"metric": "attack_forward_calls", "value": float(run.counts.forwards)},
                    {"metric": "attack_host_reads", "value": float(run.counts.reads)}]
        if EXAMPLES_BY in run.adversarial:
            ctx.kept["examples"] = {e: run.adversarial[EXAMPLES_BY][e][: p.examples] for e in grid}
        flags = sanity_flags(records, near_zero=p.near_zero)
        records += [{"metric": "sanity_flag", "value": float(f.fired), "check": f.check} for f in flags]
        records.append({"metric": "sanity_flags", "value": float(sum(f.fired for f in flags))})
        return records

    def card_details(self, params: Any, dataset: str) -> dict[str, Any]:
        """The threat model and every attack's budget as this suite's params set them."""
        classes = DATASETS.get(dataset).num_classes
        named = [*params.attacks, *params.ensemble, *params.extra_attacks, *params.minimal]
        return {"threat_model": f"{THREAT[self.NORM]}, eps {list(eps_grid(params, dataset).eps)}",
                "attack_budgets": {a: build(a, params.attack_args.get(a)).for_norm(self.NORM).budget(classes)
                                   for a in named}}

    def notes(self, records: list[dict[str, Any]], params: Any) -> list[str]:
        """One line per fired sanity flag and per skipped attack (model, seed, what was seen), or one line naming the
        checks that ran and passed; then each model's attacks, in the order they ran, with their budgets."""
        groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
        for r in records:
            groups[(r["model"], r["dataset"], r["seed"])].append(r)
        lines = [
            f"FLAG {model} / {dataset} seed {seed}: {f.check} ({CHECKS[f.check]}): {f.detail}"
            for (model, dataset, seed), rows in groups.items()
            for f in sanity_flags(rows, near_zero=params.near_zero)
            if f.fired
        ] or _passed_line(groups)
        skipped = {(r["model"], r["attack"], r["reason"]) for r in records if r["metric"] == "attack_skipped"}
        lines += [f"{attack} not run on {model}: {reason}" for model, attack, reason in sorted(skipped)]
        return lines + budget_lines(records, params, self.NORM)

    def figures(self, ctx: Context) -> dict[str, Figure]:
        """APGD adversarial examples of the first test images at every eps (those measure() kept; APGD run here when
        it was not among the unit's attacks), titled by the model's decision."""
        p, grid = ctx.params, ctx.resources.eps
        n = min(p.examples, len(ctx.splits.test_y))
        images, labels = next(batches(ctx.splits.test_x[:n], ctx.splits.test_y[:n], n, device=ctx.device))
        examples = ctx.kept.get("examples")
        if examples is None:
            settings = engine_settings(p, ctx.splits.spec.num_classes, ctx.device, ctx.model, images[:1], self.NORM)
            run = UnitAttacks(ctx.model, images, labels, np.ones(n, dtype=bool), grid, settings, dict(p.attack_args),
                              keep={EXAMPLES_BY: np.arange(n)})
            run.run(planned(SimpleNamespace(attacks=[EXAMPLES_BY], ensemble=[], extra_attacks=[]), grid, None))
            examples = run.adversarial[EXAMPLES_BY]
        stacked = torch.cat([examples[e].detach() for e in grid])  # (len(grid) * n, C, H, W)
        preds = predict(ctx.model, stacked, labels.repeat(len(grid)), batch_size=len(stacked),
                        device=ctx.device).view(len(grid), n).tolist()
        pixels = stacked.cpu().permute(0, 2, 3, 1).squeeze(-1).numpy()
        truth = labels.tolist()
        with plt.rc_context(STYLE):
            fig, axes = plt.subplots(len(grid), n, figsize=(0.9 * n, 1.0 * len(grid)), squeeze=False)
            for row, eps in enumerate(grid):
                for col, ax in enumerate(axes[row]):
                    ax.imshow(pixels[row * n + col], cmap="gray", vmin=0, vmax=1)
                    wrong = preds[row][col] != truth[col]
                    ax.set_title(f"{preds[row][col]}", fontsize=7, color="red" if wrong else "black")
                    ax.set_xticks([])
                    ax.set_yticks([])
                axes[row][0].set_ylabel(f"eps={eps:g}", fontsize=7)
            apgd = build(EXAMPLES_BY, p.attack_args.get(EXAMPLES_BY))
            fig.suptitle(f"{ctx.model_name}: decisions under APGD ({apgd.steps} steps, margin loss; red = wrong; an "
                         "image wrong clean is shown clean)", fontsize=8)
            fig.tight_layout()
        return {"adversarial_examples": fig}


def marginal_records(broken: dict[str, dict[float, np.ndarray]], ensemble: list[str]) -> list[dict[str, Any]]:
    """Per ensemble attack and positive eps: the images it broke that every attack before it (in run order) left
    robust at this and every smaller eps."""
    names = list(broken)
    n = len(next(iter(next(iter(broken.values())).values()))) if broken else 0
    out = []
    for name in (a for a in ensemble if a in broken):
        positive = sorted(e for e in broken[name] if e > 0)
        earlier = {a: broken[a] for a in names[: names.index(name)]}
        before = worst_case_broken(earlier, positive, n)
        after = worst_case_broken({**earlier, name: broken[name]}, positive, n)
        out += [{"metric": "marginal_breaks", "attack": name, "eps": e,
                 **accuracy_fields(after[e] & ~before[e])} for e in positive]
    return out


def budget_lines(records: list[dict[str, Any]], params: Any, norm: str = "linf") -> list[str]:
    """Per (model, dataset): the attacks that ran on it, in the order they ran, each with its budget (steps,
    restarts, targets, queries) under params.attack_args."""
    ran: dict[tuple[str, str], set[str]] = defaultdict(set)
    for r in records:
        if r["metric"] in ("robust_accuracy", "marginal_breaks") and r["attack"] in CATALOG:
            ran[(r["model"], r["dataset"])].add(r["attack"])
    order = [*params.attacks, *params.ensemble, *params.extra_attacks, *table_order()]
    lines = []
    for (model, dataset), attacks in ran.items():
        if dataset not in DATASETS:  # records made by hand (no class count to state the targets by)
            continue
        classes = DATASETS.get(dataset).num_classes
        got = [f"{a} ({build(a, params.attack_args.get(a)).for_norm(norm).budget(classes)})"
               for a in sorted(attacks, key=order.index)]
        lines.append(f"budget on {model} / {dataset}: " + "; ".join(got))
    return lines


def attack_passes(params: Any, grid: EpsGrid, num_classes: int, norm: str = "linf") -> float:
    """The declared image passes per test image of every attack of params over its eps values, in threat model
    `norm` (capsbench.attacks' declared cost per row)."""
    return fixed_eps_passes(params, grid, num_classes, norm) + sum(minimal_passes(params, num_classes, norm).values())


def fixed_eps_passes(params: Any, grid: EpsGrid, num_classes: int, norm: str) -> float:
    """The fixed-eps attacks' part of attack_passes."""
    return float(sum(build(a.name, params.attack_args.get(a.name)).for_norm(norm).cost(e, num_classes, norm)
                     for a in planned(params, grid.eps, grid.blackbox) for e in a.eps))


def minimal_passes(params: Any, num_classes: int, norm: str) -> dict[str, float]:
    """Each minimum-norm attack's part of attack_passes (it runs once per image, at no eps)."""
    return {a: build(a, params.attack_args.get(a)).cost(0.0, num_classes, norm) for a in params.minimal}


class RobustnessL2Suite(RobustnessSuite):
    """The same attacks, worst case, ensemble and checks in L2: each attack's L2 form (FGM, PGD and APGD along the
    normalised gradient, projected onto the L2 ball and [0, 1]; Square as torchattacks has it in L2), on an L2 grid
    per dataset (suites/robustness_l2.yaml), in tables of their own."""

    NORM = "l2"
    description = (
        "robust accuracy under L2 attacks reported alone (params.attacks), an ensemble on what they leave "
        "(params.ensemble), the per-image worst case, each model's budget, masking checks"
    )
    layout = robustness_layout("L2")


def _passed_line(groups: dict[tuple, list[dict[str, Any]]]) -> list[str]:
    """The checks that ran and passed, as the records hold them: those of every (model, dataset, seed), then each
    check that ran for some models only, naming them (a check that did not run is never said to have passed)."""
    ran = {key: {r.get("check") for r in rows if r["metric"] == "sanity_flag"} for key, rows in groups.items()}
    everywhere = [c for c in CHECKS if ran and all(c in checks for checks in ran.values())]
    partly = {c: sorted({key[0] for key, checks in ran.items() if c in checks}) for c in CHECKS}
    partly = {c: models for c, models in partly.items() if models and c not in everywhere}
    if not everywhere and not partly:
        return []
    text = "sanity checks passed for every model and seed: " + (", ".join(everywhere) or "none ran for all")
    return [text + "".join(f"; {c}, which ran for {', '.join(m)} only" for c, m in partly.items())]
