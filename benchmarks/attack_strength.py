"""Is capsbench's per-image worst case as strong as an independent attacker? Runs the robustness suite's attacks on a
quick-budget model (trained through capsbench, or found in its checkpoint cache) and, beside them, a reference attack
written here without capsbench.attacks: multi-targeted PGD on the raw class evidence (pre-squash norms |s_j| of
vector capsules; the model's declared evidence; else its logits), `--steps` sign steps of 2.5 eps / steps from a
uniform random start, towards every other class in turn (likeliest first by the clean evidence), every iterate judged
by the model's own decision. Prints per eps both robust accuracies, the reference's 95 % Wilson interval, the images
broken only by the reference and only by capsbench, McNemar's p, and the time each attack took; ends with
`attack_strength <model> eps=E capsbench=X reference=Y within_interval=yes|no` per eps.

    CAPSBENCH_DATA=DIR uv run python benchmarks/attack_strength.py --model effcapsnet [--images 1000]
        [--steps 100] [--set params.pgd_restarts=2 ...] [--cache-dir DIR]

--set passes key=value settings to the composed robustness config (e.g. params.pgd_targets=3). --curve measures what
each PGD pass buys: starting from the worst case of the suite's other attacks (FGSM, Vote, Square), it runs the passes
of `pgd` and (capsule models) `pgd_adaptive` one after another, each on what is still robust, the second restart of
every pass last, and prints after each pass the worst case at every eps and the seconds spent so far.
"""

from __future__ import annotations

import capsbench  # noqa: F401  (first: sets OMP_WAIT_POLICY before torch loads OpenMP)

# isort: split
import argparse
import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import torch

from capsbench.attacks import ATTACKS, WORST_CASE
from capsbench.config.compose import compose
from capsbench.config.request import parse_command_line
from capsbench.data import as_images
from capsbench.models import create_model
from capsbench.run.execute import load_data, trained
from capsbench.run.plan import plan
from capsbench.suites import SUITES, Context
from capsbench.suites.robustness.suite import settings as attack_settings
from capsbench.util.stats import decode_outcomes, mcnemar_p, wilson_interval

EPS = (0.05, 0.1, 0.15, 0.2)


def evidence(out) -> torch.Tensor:
    """(B, C) raw class evidence: pre-squash norms where the model exposes its capsules before the squash."""
    if out.pre_squash is not None:
        return out.pre_squash.norm(dim=-1)
    return out.evidence if out.evidence is not None else out.logits


def reference_attack(model, images: torch.Tensor, labels: torch.Tensor, eps: float, steps: int,
                     seed: int = 12345) -> torch.Tensor:
    """Multi-targeted PGD on the raw evidence: broken (N,) bool, an image broken once any iterate towards any target
    is misclassified. images (N, C, H, W) in [0, 1], all classified correctly clean."""
    with torch.no_grad():
        clean = evidence(model(images))
    classes = clean.shape[1]
    order = clean.scatter(1, labels[:, None], float("-inf")).argsort(dim=1, descending=True)  # (N, C)
    broken = torch.zeros(len(images), dtype=torch.bool)
    step = 2.5 * eps / steps
    lower, upper = (images - eps).clamp(min=0), (images + eps).clamp(max=1)
    for rank in range(classes - 1):
        live = (~broken).nonzero().squeeze(1)
        gen = torch.Generator().manual_seed(seed + rank)
        x = images[live] + eps * (2 * torch.rand(images[live].shape, generator=gen) - 1)
        x = torch.min(torch.max(x, lower[live]), upper[live])
        y, t = labels[live], order[live, rank]
        for i in range(steps + 1):
            x.requires_grad_(i < steps)
            with torch.set_grad_enabled(i < steps):
                out = model(x)
            wrong = out.scores.detach().argmax(dim=1) != y
            broken[live[wrong]] = True
            keep = ~wrong
            if i == steps or not keep.any():
                break
            e = evidence(out)
            loss = (e.gather(1, t[:, None]) - e.gather(1, y[:, None])).sum()
            (grad,) = torch.autograd.grad(loss, x)
            x = x.detach()[keep] + step * grad[keep].sign()
            live, y, t = live[keep], y[keep], t[keep]
            x = torch.min(torch.max(x, lower[live]), upper[live])
    return broken


def curve(model, splits, params, clean: np.ndarray, records: list[dict], grid: list[float], num_classes: int) -> None:
    """The worst case after each PGD pass, in order, the second restarts last; the cumulative seconds."""
    n, positive = len(clean), sorted(e for e in grid if e > 0)
    others = sorted({r["attack"] for r in records if r["metric"] == "robust_accuracy"} - {"pgd", "pgd_adaptive",
                                                                                          WORST_CASE})
    broken = {e: np.zeros(n, dtype=bool) for e in positive}
    for r in records:
        if r["metric"] == "robust_accuracy" and r["attack"] in others:
            for e in positive:
                if 0 < r["eps"] <= e:
                    broken[e] |= clean & ~decode_outcomes(r["outcomes"], n)
    settings = attack_settings(params, num_classes)
    two = dataclasses.replace(settings, restarts=2)
    passes = [("pgd", one) for one in ATTACKS.get("pgd").passes(model, two)]
    if ATTACKS.get("pgd_adaptive").applies_to(model, as_images(splits.test_x[:1], "cpu")) is None:
        passes += [("pgd_adaptive", one) for one in ATTACKS.get("pgd_adaptive").passes(model, two)]
    passes.sort(key=lambda item: item[1].restart)  # every pass's first restart, then every second one

    def worst() -> str:
        return " ".join(f"{e:g}: {100 * (clean & ~broken[e]).mean():5.1f}" for e in positive)

    print(f"curve: worst case (%) of {', '.join(others)} alone, then each PGD pass in turn on what is left")
    print(f"  {'start':52s} {worst()}")
    elapsed = 0.0
    for attack, one in passes:
        single = type("SinglePass", (type(ATTACKS.get(attack)),), {"passes": lambda self, m, s, one=one: [one]})()
        start = time.perf_counter()
        for e in positive:
            left = np.flatnonzero(clean & ~broken[e])
            if len(left):
                result = single.run(model, as_images(splits.test_x[left], "cpu"), splits.test_y[left],
                                    torch.as_tensor(left), [e], settings)
                broken[e][left[result.broken[e].numpy()]] = True
        elapsed += time.perf_counter() - start
        for smaller, larger in zip(positive, positive[1:]):  # broken at a smaller eps is broken at a larger one
            broken[larger] |= broken[smaller]
        label = f"{attack} {one.loss}{one.offset or ''} restart {one.restart} ({type(one.objective).__name__})"
        print(f"  + {label:50s} {worst()}   {elapsed:6.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="effcapsnet")
    parser.add_argument("--images", type=int, default=1000, help="first N test images (the default job's sample)")
    parser.add_argument("--steps", type=int, default=100, help="reference steps per target")
    parser.add_argument("--set", nargs="*", default=[], help="key=value settings for the robustness suite")
    parser.add_argument("--cache-dir", default=None, help="checkpoint cache (default: capsbench's)")
    parser.add_argument("--checkpoint", type=Path, default=None,
                        help="a capsbench checkpoint (.ckpt) of the model to attack, instead of the cache's")
    parser.add_argument("--curve", action="store_true", help="the worst case after each PGD pass and its cost")
    parser.add_argument("--records", type=Path, default=None,
                        help="a JSON file keeping the suite's records: read when it exists, written otherwise")
    args = parser.parse_args()
    overrides = ["suite=robustness", f"models=[{args.model}]", f"data.test_subset={args.images}", "device=cpu",
                 *([f"cache_dir={args.cache_dir}"] if args.cache_dir else []), *args.set]
    cfg = compose(parse_command_line(overrides))
    [unit] = plan(cfg)
    if args.checkpoint is not None:  # weights trained by capsbench under an older code hash: the same model
        blob = torch.load(args.checkpoint, map_location="cpu", weights_only=True)
        model = create_model(args.model, **blob["meta"]["identity"]["model_args"])
        model.load_state_dict(blob["state_dict"])
        model.eval()
    else:
        model = trained(unit).model.eval()
    ucfg = unit.run_config()
    splits = load_data(ucfg.dataset, ucfg.data)
    suite = SUITES.get("robustness")()
    ctx = Context(model=model, model_name=args.model, splits=splits, params=ucfg.params, device="cpu",
                  batch_size=ucfg.train.eval_batch_size, seed=unit.seed, protocol=suite.protocol(ucfg),
                  resources=suite.prepare(ucfg, splits))
    start = time.perf_counter()
    if args.records is not None and args.records.exists():
        records = json.loads(args.records.read_text())
    else:
        records = suite.measure(ctx)
        if args.records is not None:
            args.records.write_text(json.dumps(records, default=float))
    suite_seconds = time.perf_counter() - start
    n = len(splits.test_y)
    clean = decode_outcomes(next(r for r in records if r["metric"] == "clean_accuracy")["outcomes"], n)
    print(f"{args.model}: {n} test images, {int(clean.sum())} correct clean; the suite's attacks took "
          f"{suite_seconds:.0f} s ({' '.join(args.set) or 'default settings'})")
    if args.curve:
        curve(model, splits, ucfg.params, clean, records, list(ctx.resources.eps), splits.spec.num_classes)
        return
    images = as_images(splits.test_x, "cpu")
    for eps in EPS:
        worst = next(r for r in records if r["metric"] == "robust_accuracy" and r.get("attack") == "worst_case"
                     and r["eps"] == eps)
        ours = decode_outcomes(worst["outcomes"], n)
        start = time.perf_counter()
        ref = clean.copy()
        ids = np.flatnonzero(clean)
        broken = reference_attack(model, images[ids], splits.test_y[ids], eps, args.steps)
        ref[ids[broken.numpy()]] = False
        took = time.perf_counter() - start
        low, high = (100 * v for v in wilson_interval(int(ref.sum()), n))
        only_ref, only_ours = int((ours & ~ref).sum()), int((ref & ~ours).sum())
        inside = low <= 100 * ours.mean() <= high
        print(f"eps {eps:g}: capsbench worst case {100 * ours.mean():.1f} %, reference {100 * ref.mean():.1f} % "
              f"[{low:.1f}, {high:.1f}] ({took:.0f} s); broken only by the reference {only_ref}, only by capsbench "
              f"{only_ours}; McNemar p = {mcnemar_p(only_ref, only_ours):.2g}")
        print(f"attack_strength {args.model} eps={eps:g} capsbench={100 * ours.mean():.1f} "
              f"reference={100 * ref.mean():.1f} within_interval={'yes' if inside else 'no'}")


if __name__ == "__main__":
    main()
