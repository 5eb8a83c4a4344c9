"""Is capsbench's per-image worst case as strong as an independent attacker? Runs the robustness suite (its default
attacks, or --set ones) on a quick-budget model and, beside it, a reference attack written here without
capsbench.attacks: APGD (Croce and Hein, "Reliable evaluation of adversarial robustness with an ensemble of diverse
parameter-free attacks", arXiv:2003.01690), following the authors' code (step 2 eps, momentum 0.75, checks after
0.22 n, then every max(k - 0.03 n, 0.06 n) steps, halving from the best point), on DLR over the raw class evidence
(pre-squash norms |s_j| of vector capsules; the model's declared evidence; else its logits): untargeted, then
targeted DLR towards each other class in turn (likeliest first by the clean evidence), --steps each, every iterate
judged by the model's own decision. Prints per eps both robust accuracies with their 95 % Wilson intervals, the images
broken only by the reference and only by capsbench, McNemar's p and the seconds of each; ends with
`attack_strength <model> eps=E capsbench=X reference=Y within_interval=yes|no` per eps.

    CAPSBENCH_DATA=DIR uv run python benchmarks/attack_strength.py --model cnn_sabour --checkpoint CKPT --out DIR
        [--images 1000] [--steps 100] [--set params.attack_args.apgd_targeted.targets=3 ...] [--cache-dir DIR]
        [--eps 0.1 ...] [--records RUN/robustness/records.jsonl]

--out keeps each eps's reference result and the suite's records (and its seconds): a finished piece is read back,
never run again; --reference-only stops after the reference's pieces (they do not depend on capsbench's settings).
"""

from __future__ import annotations

import capsbench  # noqa: F401  (first: sets OMP_WAIT_POLICY before torch loads OpenMP)

# isort: split
import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from capsbench.config.compose import compose
from capsbench.config.request import parse_command_line
from capsbench.data import as_images
from capsbench.models import create_model
from capsbench.run.execute import load_data, trained
from capsbench.run.plan import plan
from capsbench.suites import SUITES, Context
from capsbench.util.stats import decode_outcomes, mcnemar_p, wilson_interval

EPS = (0.05, 0.1, 0.15, 0.2)


def evidence(out) -> torch.Tensor:
    """(B, C) raw class evidence: pre-squash norms where the model exposes its capsules before the squash."""
    if out.pre_squash is not None:
        return out.pre_squash.norm(dim=-1)
    return out.evidence if out.evidence is not None else out.logits


def dlr(z: torch.Tensor, y: torch.Tensor, t: torch.Tensor | None) -> torch.Tensor:
    """(B,) DLR, untargeted (t None) or targeted at t, as the authors define it (B, C), (B,), (B,)."""
    z = z.float()
    top = z.sort(dim=1, descending=True).values
    true = z.gather(1, y[:, None]).squeeze(1)
    if t is None:
        rival = torch.where(top[:, 0] == true, top[:, 1], top[:, 0])
        return -(true - rival) / (top[:, 0] - top[:, 2] + 1e-12)
    return -(true - z.gather(1, t[:, None]).squeeze(1)) / (top[:, 0] - 0.5 * (top[:, 2] + top[:, 3]) + 1e-12)


def apgd(model, images, labels, eps: float, steps: int, targets: torch.Tensor | None, gen: torch.Generator):
    """One APGD run from a random start: broken (N,) bool, an image broken once any iterate is misclassified.
    Rows leave once broken (their later iterates cannot change the answer)."""
    n = len(images)
    broken = torch.zeros(n, dtype=torch.bool)
    lower, upper = (images - eps).clamp(min=0), (images + eps).clamp(max=1)
    t = 2 * torch.rand(images.shape, generator=gen) - 1
    x = images + eps * t / t.flatten(1).abs().amax(1).view(-1, 1, 1, 1)
    x = torch.min(torch.max(x, lower), upper)
    live = torch.arange(n)
    first, size_decr, floor = max(int(0.22 * steps), 1), max(int(0.03 * steps), 1), max(int(0.06 * steps), 1)

    def look(x, live):
        x = x.clone().requires_grad_(True)
        out = model(x)
        loss = dlr(evidence(out), labels[live], None if targets is None else targets[live])
        (g,) = torch.autograd.grad(loss.sum(), x)
        return loss.detach(), g, out.scores.detach().argmax(1) != labels[live]

    loss, grad, wrong = look(x, live)
    broken[live[wrong]] = True
    step = torch.full((n,), 2.0 * eps)
    x_old, best, x_best, g_best = x.clone(), loss.clone(), x.clone(), grad.clone()
    history = [loss.clone()]  # losses of the live rows, per iterate
    reduced, best_checked = torch.ones(n, dtype=torch.bool), best.clone()
    k, count = first, 0
    for i in range(steps):
        keep = ~wrong
        if not keep.any():
            break
        live, x, x_old, grad = live[keep], x[keep], x_old[keep], grad[keep]
        best, x_best, g_best, best_checked = best[keep], x_best[keep], g_best[keep], best_checked[keep]
        step, reduced = step[keep], reduced[keep]
        history = [h[keep] for h in history]
        lo, hi = lower[live], upper[live]
        a = 0.75 if i > 0 else 1.0
        s = step.view(-1, 1, 1, 1)
        z = torch.min(torch.max(x + s * grad.sign(), lo), hi)
        x_new = torch.min(torch.max(x + (z - x) * a + (x - x_old) * (1 - a), lo), hi)
        x_old, x = x, x_new
        loss, grad, wrong = look(x, live)
        broken[live[wrong]] = True
        history.append(loss.clone())
        up = loss > best
        best, x_best[up], g_best[up] = torch.where(up, loss, best), x[up], grad[up]
        count += 1
        if count == k:
            rises = sum((history[-j] > history[-j - 1]).float() for j in range(1, min(k, len(history) - 1) + 1))
            cut = (rises <= 0.75 * k) | (~reduced & (best_checked >= best))
            reduced, best_checked = cut, best.clone()
            step = torch.where(cut, step / 2, step)
            x[cut], grad[cut] = x_best[cut], g_best[cut]
            k, count = max(k - size_decr, floor), 0
            history = history[-1:]
    return broken


def reference_attack(model, images: torch.Tensor, labels: torch.Tensor, eps: float, steps: int,
                     seed: int = 12345) -> torch.Tensor:
    """APGD-DLR, then APGD-T towards every other class in turn (likeliest first), each on the images the earlier runs
    left: broken (N,) bool. images (N, C, H, W) in [0, 1], all classified correctly clean."""
    with torch.no_grad():
        clean = evidence(model(images))
    order = clean.scatter(1, labels[:, None], float("-inf")).argsort(dim=1, descending=True)  # (N, C)
    broken = torch.zeros(len(images), dtype=torch.bool)
    for rank in range(clean.shape[1]):  # 0: untargeted; then each other class
        live = (~broken).nonzero().squeeze(1)
        if len(live) == 0:
            break
        gen = torch.Generator().manual_seed(seed + rank)
        targets = None if rank == 0 else order[live, rank - 1]
        hit = apgd(model, images[live], labels[live], eps, steps, targets, gen)
        broken[live[hit]] = True
    return broken


def load_model(args: argparse.Namespace, unit):
    if args.checkpoint is None:
        return trained(unit).model.eval()
    blob = torch.load(args.checkpoint, map_location="cpu", weights_only=True)  # weights trained under an older hash
    model = create_model(args.model, **blob["meta"]["identity"]["model_args"])
    model.load_state_dict(blob["state_dict"])
    return model.eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="capsnet")
    parser.add_argument("--images", type=int, default=1000, help="first N test images (the default job's sample)")
    parser.add_argument("--steps", type=int, default=100, help="reference APGD steps per run")
    parser.add_argument("--set", nargs="*", default=[], help="key=value settings for the robustness suite")
    parser.add_argument("--cache-dir", default=None, help="checkpoint cache (default: capsbench's)")
    parser.add_argument("--checkpoint", type=Path, default=None,
                        help="a capsbench checkpoint (.ckpt) of the model to attack, instead of the cache's")
    parser.add_argument("--out", type=Path, default=None, help="keeps the suite's records and the reference's results")
    parser.add_argument("--reference-only", action="store_true", help="run (and keep) the reference's pieces only")
    parser.add_argument("--eps", type=float, nargs="*", default=list(EPS), help="the eps values to check")
    parser.add_argument("--records", type=Path, default=None,
                        help="a run's records.jsonl to compare with (its seed-0 rows of --model) instead of running "
                             "the suite here; the run must have attacked the same weights and first --images images")
    args = parser.parse_args()
    overrides = ["suite=robustness", f"models=[{args.model}]", f"data.test_subset={args.images}", "device=cpu",
                 *([f"cache_dir={args.cache_dir}"] if args.cache_dir else []), *args.set]
    cfg = compose(parse_command_line(overrides))
    [unit] = plan(cfg)
    model = load_model(args, unit)
    ucfg = unit.run_config()
    splits = load_data(ucfg.dataset, ucfg.data)
    suite = SUITES.get("robustness")()
    ctx = Context(model=model, model_name=args.model, splits=splits, params=ucfg.params, device="cpu",
                  batch_size=ucfg.train.eval_batch_size, seed=unit.seed, protocol=suite.protocol(ucfg),
                  resources=suite.prepare(ucfg, splits))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
    n, images = len(splits.test_y), as_images(splits.test_x, "cpu")
    with torch.no_grad():
        clean = np.concatenate([(model(images[i:i + 500]).scores.argmax(1) == splits.test_y[i:i + 500]).numpy()
                                for i in range(0, n, 500)])
    ids = np.flatnonzero(clean)
    references = {}
    for eps in args.eps:
        piece = None if args.out is None else args.out / f"reference@{eps:g}.json"
        if piece is not None and piece.exists():
            references[eps] = json.loads(piece.read_text())
            continue
        start = time.perf_counter()
        broken = reference_attack(model, images[ids], splits.test_y[ids], eps, args.steps)
        references[eps] = {"broken": ids[broken.numpy()].tolist(), "seconds": time.perf_counter() - start}
        if piece is not None:
            piece.write_text(json.dumps(references[eps]))
        print(f"reference eps {eps:g}: broke {len(references[eps]['broken'])} of {len(ids)} "
              f"({references[eps]['seconds']:.0f} s)", flush=True)
    if args.reference_only:
        return
    saved = None if args.out is None else args.out / "records.json"
    if args.records is not None:
        rows = [json.loads(line) for line in args.records.read_text().splitlines() if line.strip()]
        kept = {"records": [r for r in rows if r.get("model") == args.model and r.get("seed") == 0],
                "seconds": float("nan")}
    elif saved is not None and saved.exists():
        kept = json.loads(saved.read_text())
    else:
        start = time.perf_counter()
        kept = {"records": suite.measure(ctx), "seconds": time.perf_counter() - start}
        if saved is not None:
            saved.write_text(json.dumps(kept, default=float))
    records = kept["records"]
    source = (f"records of {args.records}" if args.records
              else f"the suite's attacks took {kept['seconds']:.0f} s")
    settings = " ".join(args.set) or "default settings"
    print(f"{args.model}: {n} test images, {len(ids)} correct clean; {source} ({settings})")
    for eps in args.eps:
        worst = next(r for r in records if r["metric"] == "robust_accuracy" and r.get("attack") == "worst_case"
                     and r["eps"] == eps)
        ours = decode_outcomes(worst["outcomes"], n)
        ref = clean.copy()
        ref[references[eps]["broken"]] = False
        low, high = (100 * v for v in wilson_interval(int(ref.sum()), n))
        ours_low, ours_high = (100 * v for v in wilson_interval(int(ours.sum()), n))
        only_ref, only_ours = int((ours & ~ref).sum()), int((ref & ~ours).sum())
        inside = low <= 100 * ours.mean() <= high
        print(f"eps {eps:g}: capsbench worst case {100 * ours.mean():.1f} % [{ours_low:.1f}, {ours_high:.1f}], "
              f"reference {100 * ref.mean():.1f} % [{low:.1f}, {high:.1f}] ({references[eps]['seconds']:.0f} s); "
              f"broken only by the reference {only_ref}, only by capsbench {only_ours}; "
              f"McNemar p = {mcnemar_p(only_ref, only_ours):.2g}")
        print(f"attack_strength {args.model} eps={eps:g} capsbench={100 * ours.mean():.1f} "
              f"reference={100 * ref.mean():.1f} within_interval={'yes' if inside else 'no'}")


if __name__ == "__main__":
    main()
