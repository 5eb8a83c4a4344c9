"""What each attack pass buys: every candidate pass run alone on every test image the model classifies correctly, at
every eps of the robustness grid, its broken images and its cost (seconds, row-steps = images passed forward) stored
piece by piece under --out (a finished piece is never run again), then a table: per model and eps the images each pass
breaks alone, its marginal breaks (images no pass before it in the listed order broke, at this or a smaller eps), the
images only it breaks among all measured passes, its seconds; and a figure of the worst case against cumulative cost.

    CAPSBENCH_DATA=DIR uv run python benchmarks/attack_passes.py --model capsnet --checkpoint CKPT --out DIR
        [--images 1000] [--passes apgd_dlr apgd_t1 ...] [--threads 2]
    uv run python benchmarks/attack_passes.py --report DIR/capsnet DIR/cnn_sabour ... [--order a b c] [--figure PNG]

Passes (each one pass of capsbench's row engine, capsbench.attacks.base.Pass, with PGD's sign step at --pgd-steps and
the robustness params' PGD step ratio, or APGD's step rule at --apgd-steps, unless the name ends in _<steps>): fgsm;
pgd_ce, pgd_margin (the model's attack logits); apgd_ce (attack logits); apgd_dlr and apgd_dlr_r1 (raw class evidence,
two random starts); apgd_t1..apgd_t9 (targeted DLR on the raw evidence towards the class ranked k among the others);
apgdraw_margin, apgdraw_t1..apgdraw_t3 (APGD with the margin and the targeted margin on the raw evidence); capsule
models also presquash_ce, presquash_margin (log-normalised pre-squash norms, exact), bpda_ce, bpda_margin (the same,
straight-through), raw_margin, raw_t1..raw_t3 (PGD margin on the raw evidence, untargeted and targeted), vote_ce,
vote_margin (the vote surrogate), apgd_dlr_bpda (APGD-DLR on the raw evidence, straight-through), apgd_dlr_vote,
apgdbpda_margin (APGD with the margin on the raw evidence, straight-through) and apgdvote_margin (APGD with the margin
on the vote surrogate).
"""

from __future__ import annotations

import capsbench  # noqa: F401  (first: sets OMP_WAIT_POLICY before torch loads OpenMP)

# isort: split
import argparse
import json
import re
import time
from pathlib import Path

import torch

from capsbench.attacks import EngineSettings, build, run_attack
from capsbench.attacks.base import Pass, RowAttack
from capsbench.attacks.objectives import (
    FORWARDS,
    AdaptiveObjective,
    Objective,
    PreSquashObjective,
    RawEvidenceObjective,
    StraightThroughRawObjective,
    VoteObjective,
)
from capsbench.attacks.step_rules import APGDStep, SignStep
from capsbench.config.compose import compose
from capsbench.config.request import parse_command_line
from capsbench.data import as_images
from capsbench.models import create_model
from capsbench.models.base import NotApplicable
from capsbench.run.execute import load_data, trained
from capsbench.run.plan import plan

EPS = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3)
CORE = ("fgsm", "pgd_ce", "pgd_margin", "apgd_ce", "apgd_dlr", *(f"apgd_t{k}" for k in range(1, 10)), "apgd_dlr_r1",
        "apgdraw_margin", "apgdraw_t1", "apgdraw_t2", "apgdraw_t3")
CAPSULE = ("presquash_ce", "presquash_margin", "bpda_ce", "bpda_margin", "raw_margin", "raw_t1", "raw_t2", "raw_t3",
           "vote_ce", "vote_margin", "apgd_dlr_bpda", "apgd_dlr_vote", "apgdbpda_margin", "apgdvote_margin")


def candidate(name: str, pgd_steps: int, apgd_steps: int, step_ratio: float) -> Pass:
    """The one pass a candidate pass name stands for."""
    if m := re.fullmatch(r"(.+)_(\d+)", name):
        name, pgd_steps, apgd_steps = m.group(1), int(m.group(2)), int(m.group(2))
    sign, apgd = SignStep(step_ratio), APGDStep()
    objectives = {"pgd": Objective, "apgd": Objective, "presquash": PreSquashObjective, "bpda": AdaptiveObjective,
                  "raw": RawEvidenceObjective, "vote": VoteObjective, "apgdraw": RawEvidenceObjective,
                  "apgdbpda": StraightThroughRawObjective, "apgdvote": VoteObjective}
    if name == "fgsm":
        return Pass(Objective(), "ce", SignStep(1.0), 1, random_start=False)
    if m := re.fullmatch(r"apgd_t(\d)", name):
        return Pass(RawEvidenceObjective(), "targeted_dlr", apgd, apgd_steps, 0, int(m.group(1)))
    if m := re.fullmatch(r"raw_t(\d)", name):
        return Pass(RawEvidenceObjective(), "targeted", sign, pgd_steps, 0, int(m.group(1)))
    if m := re.fullmatch(r"apgdraw_t(\d)", name):
        return Pass(RawEvidenceObjective(), "targeted", apgd, apgd_steps, 0, int(m.group(1)))
    if m := re.fullmatch(r"apgd_dlr(_r(\d))?(_bpda|_vote)?", name):
        kind = {None: RawEvidenceObjective, "_bpda": StraightThroughRawObjective, "_vote": VoteObjective}[m.group(3)]
        return Pass(kind(), "dlr", apgd, apgd_steps, int(m.group(2) or 0))
    family, loss = name.split("_")
    if family.startswith("apgd"):
        return Pass(objectives[family](), loss, apgd, apgd_steps)
    return Pass(objectives[family](), loss, sign, pgd_steps)


class OnePass(RowAttack):
    """A row attack of one pass at every eps."""

    name = "one_pass"

    def __init__(self, one: Pass) -> None:
        self.one = one

    def passes(self, eps: float, num_classes: int, norm: str = "linf") -> list[Pass]:
        return [self.one]


class Counter:
    """Images passed forward through the model (every call, with or without gradients): the attack's row-steps."""

    def __init__(self, model) -> None:
        self.rows = 0
        model.register_forward_pre_hook(self.hook)

    def hook(self, module, args) -> None:
        self.rows += len(args[0])


def run_piece(one: Pass, model, images, labels, ids, eps: float, settings: EngineSettings, counter: Counter) -> dict:
    """One pass alone at one eps on the given images, through the row engine: which broke, seconds, row-steps."""
    rows, start = counter.rows, time.perf_counter()
    result = run_attack(model, OnePass(one), images, labels, ids.tolist(), [eps], settings)
    return {"broken": ids[result.broken[eps].cpu()].tolist(), "seconds": time.perf_counter() - start,
            "row_steps": counter.rows - rows, "attacked": len(ids)}


def measure(args: argparse.Namespace) -> None:
    overrides = ["suite=robustness", f"models=[{args.model}]", f"data.test_subset={args.images}", "device=cpu"]
    cfg = compose(parse_command_line(overrides + ([f"cache_dir={args.cache_dir}"] if args.cache_dir else [])))
    [unit] = plan(cfg)
    if args.checkpoint is not None:
        blob = torch.load(args.checkpoint, map_location="cpu", weights_only=True)
        model = create_model(args.model, **blob["meta"]["identity"]["model_args"])
        model.load_state_dict(blob["state_dict"])
    else:
        model = trained(unit).model
    model.eval()
    torch.set_num_threads(args.threads)
    ucfg = unit.run_config()
    splits = load_data(ucfg.dataset, ucfg.data)
    images, labels = as_images(splits.test_x, "cpu"), splits.test_y
    with torch.no_grad():
        clean = torch.cat([model(images[i:i + 500]).scores.argmax(1) for i in range(0, len(images), 500)]) == labels
    ids = clean.nonzero().squeeze(1)
    p = ucfg.params
    step_ratio = build("pgd", p.attack_args.get("pgd")).step_ratio
    settings = EngineSettings(num_classes=splits.spec.num_classes, seed=p.attack_seed, batch_size=p.batch_size or 500)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "meta.json").write_text(json.dumps({"model": args.model, "images": len(labels), "clean": int(clean.sum()),
                                               "threads": args.threads}))
    counter = Counter(model)
    names = args.passes or [*CORE, *(CAPSULE if model.is_capsule else ())]
    for name in names:
        one = candidate(name, args.pgd_steps, args.apgd_steps, step_ratio)
        try:
            with torch.no_grad():
                one.objective.logits(FORWARDS[one.objective.forward](model, images[:1]), images[:1])
        except NotApplicable as exc:
            print(f"{args.model} {name}: not applicable ({exc})", flush=True)
            continue
        for eps in EPS:
            piece = out / f"{name}@{eps:g}.json"
            if piece.exists():
                continue
            got = run_piece(one, model, images[ids], labels[ids], ids, eps, settings, counter)
            piece.write_text(json.dumps(got))
            print(f"{args.model} {name} eps {eps:g}: broke {len(got['broken'])}/{got['attacked']} in "
                  f"{got['seconds']:.0f} s ({got['row_steps']:,} row-steps)", flush=True)


def load(folder: Path) -> tuple[dict, dict[str, dict[float, dict]]]:
    """meta and pieces[pass][eps] of one model's folder."""
    pieces: dict[str, dict[float, dict]] = {}
    for f in folder.glob("*@*.json"):
        name, eps = f.stem.rsplit("@", 1)
        got = json.loads(f.read_text())
        got["broken"] = set(got["broken"])
        pieces.setdefault(name, {})[float(eps)] = got
    return json.loads((folder / "meta.json").read_text()), pieces


def report(folders: list[Path], order: list[str] | None, figure: Path | None, only: bool = False) -> None:
    """The table (Markdown) and, with --figure, the worst case against cumulative seconds per model and eps; with
    only, just the passes of `order` (an ensemble's worst case from the measured pieces)."""
    curves = {}
    for folder in folders:
        meta, pieces = load(folder)
        names = [n for n in (order or [*CORE, *CAPSULE]) if n in pieces and len(pieces[n]) == len(EPS)]
        if not only:
            names += sorted(n for n in pieces if n not in names and len(pieces[n]) == len(EPS))
        print(f"\n**{meta['model']}**: {meta['clean']} of the first {meta['images']} test images correct clean; "
              f"per eps: broken alone / marginal (no earlier pass, this or a smaller eps) / only this pass; seconds\n")
        print("| pass | " + " | ".join(f"eps={e:g}" for e in EPS) + " | seconds | row-steps |")
        print("|---|" + "---:|" * (len(EPS) + 2))
        so_far = {e: set() for e in EPS}
        curve, spent = {e: [] for e in EPS}, 0.0
        for name in names:
            cells = []
            for i, e in enumerate(EPS):
                mine = pieces[name][e]["broken"]
                before = set().union(*(so_far[s] for s in EPS[: i + 1]))
                others = set().union(*(pieces[o][s]["broken"] for o in names if o != name for s in EPS[: i + 1]))
                cells.append(f"{len(mine)} / {len(mine - before)} / {len(mine - others)}")
                so_far[e] |= mine
            spent += sum(pieces[name][e]["seconds"] for e in EPS)
            steps = sum(pieces[name][e]["row_steps"] for e in EPS)
            print(f"| {name} | " + " | ".join(cells) + f" | {sum(pieces[name][e]['seconds'] for e in EPS):.0f} | "
                  f"{steps:,} |")
            for i, e in enumerate(EPS):
                broken = len(set().union(*(so_far[s] for s in EPS[: i + 1])))
                curve[e].append((spent, 100 * (meta["clean"] - broken) / meta["images"], name))
        robust = " / ".join(f"{c[-1][1]:.1f}" for c in curve.values())
        print(f"\nworst case over all {len(names)} passes (%, eps {' / '.join(f'{e:g}' for e in EPS)}): {robust}")
        curves[meta["model"]] = curve
    if figure is not None:
        plot(curves, figure)


def plot(curves: dict, figure: Path) -> None:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(4 * len(curves), 3.2), squeeze=False)
    for ax, (model, curve) in zip(axes[0], curves.items()):
        for e, points in curve.items():
            if e > 0.15:
                continue
            xs, ys = [0.0] + [p[0] / 60 for p in points], [None] + [p[1] for p in points]
            ax.step(xs[1:], ys[1:], where="post", label=f"eps {e:g}")
        ax.set_title(model, fontsize=9)
        ax.set_xlabel("cumulative minutes (passes run alone)", fontsize=8)
        ax.set_ylabel("robust accuracy over the passes so far (%)", fontsize=8)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(figure, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model")
    parser.add_argument("--checkpoint", type=Path, default=None)
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--out", default=None)
    parser.add_argument("--passes", nargs="*", default=None)
    parser.add_argument("--pgd-steps", type=int, default=50)
    parser.add_argument("--apgd-steps", type=int, default=100)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--report", nargs="*", type=Path, default=None, help="model folders to tabulate")
    parser.add_argument("--order", nargs="*", default=None, help="pass order for the marginal breaks")
    parser.add_argument("--only", action="store_true", help="tabulate the passes of --order only")
    parser.add_argument("--figure", type=Path, default=None)
    args = parser.parse_args()
    if args.report:
        report(args.report, args.order, args.figure, args.only)
    else:
        measure(args)


if __name__ == "__main__":
    main()
