"""The held-out check of capsbench's Square: its own random search (capsbench.attacks.square, rows of the row engine)
against torchattacks.Square, the authors' algorithm as torchattacks ships it, with the same budget (queries, p_init,
margin loss, one restart, seed 0) on the same models and images. Prints per model and eps each one's robust accuracy
with its 95 % Wilson interval, the images only one of them broke and McNemar's p, and ends with
`square_check <model> eps=E capsbench=X torchattacks=Y within_interval=yes|no` per eps (yes: capsbench's robust
accuracy lies in torchattacks' interval). The two draw their random numbers differently (capsbench per image and
query, torchattacks per batch), so they agree in distribution, not image for image.

    CAPSBENCH_DATA=DIR uv run python benchmarks/square_check.py measure --out A.json [--weights W.pt] [--device cuda]
        [--images 100] [--queries 300] [--eps 0.1 0.15 0.2] [--autoattack-eps 0.1]
    uv run python benchmarks/square_check.py compare A.json B.json

`measure` trains smoke-size capsnet and cnn_sabour briefly (seed 0; or loads them from --weights when that file
exists, and writes it when it does not, so that another environment attacks the very same weights), takes the first
--images test images each classifies correctly and runs both Squares at each --eps (and, with --autoattack-eps,
capsbench's assembled standard `autoattack`, which still runs torchattacks' parts). It writes, per model, attack and
eps, which images were broken and a SHA-256 of the adversarial images' bytes. `compare` prints per attack whether two
such files (e.g. measured with two torchattacks versions) break the same images with the same adversarial images,
and exits 1 when anything differs.
"""

from __future__ import annotations

import capsbench  # noqa: F401 I001  (sets OMP_WAIT_POLICY before torch loads OpenMP)

# isort: split
import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import torch
import torchattacks
from attack_speed import train_briefly  # benchmarks/attack_speed.py: a few hundred Adam steps
from omegaconf import OmegaConf

from capsbench.attacks import AttackResult, EngineSettings, build, decisions, run_attack
from capsbench.attacks.base import Attack
from capsbench.attacks.torchattacks_adapters import LibraryAttack
from capsbench.config.compose import compose
from capsbench.config.request import parse_command_line
from capsbench.data import DATASETS, as_images, load_splits
from capsbench.models import MODELS, Classifier, create_model
from capsbench.train.step import auto_threads
from capsbench.util.stats import mcnemar_p, wilson_interval

SQUARES = ("square", "torchattacks_square")  # capsbench's, then torchattacks'


class TorchattacksSquare(LibraryAttack):
    """torchattacks.Square on the model's attack logits (L-inf, margin loss, one restart, the engine's seed), in
    capsbench's fixed batches of images."""

    name = "torchattacks_square"
    attacks = "the model's attack logits through queries only (torchattacks.Square)"

    def __init__(self, *, queries: int = 1000, p_init: float = 0.8) -> None:
        self.queries, self.p_init = queries, p_init

    def build(self, target, eps, settings):
        return torchattacks.Square(target, norm="Linf", eps=eps, n_queries=self.queries, n_restarts=1,
                                   p_init=self.p_init, loss="margin", resc_schedule=True, seed=settings.seed)


def attacks(queries: int, p_init: float = 0.8) -> dict[str, Attack]:
    """capsbench's Square and torchattacks' at the same budget."""
    return {"square": build("square", {"queries": queries, "p_init": p_init}),
            "torchattacks_square": TorchattacksSquare(queries=queries, p_init=p_init)}


def run(attack: Attack, model: Classifier, images: torch.Tensor, labels: torch.Tensor, ids: list[int],
        eps_values: list[float], seed: int = 0) -> AttackResult:
    """One attack on every image at each eps (the engine's pool: every row at once, as the suite runs it on a CPU)."""
    settings = EngineSettings(num_classes=10, seed=seed, batch_size=max(500, len(images) * len(eps_values)))
    return run_attack(model, attack, images, labels, ids, eps_values, settings)


def summary(model: str, eps: float, ours: torch.Tensor, theirs: torch.Tensor) -> list[str]:
    """The two robust accuracies (broken (N,) bool of capsbench's and torchattacks' Square on N clean-correct images)
    with their Wilson intervals, the discordant images and McNemar's p; then the one-line result."""
    n = len(ours)
    robust = {"capsbench": n - int(ours.sum()), "torchattacks": n - int(theirs.sum())}
    interval = {k: tuple(100 * v for v in wilson_interval(r, n)) for k, r in robust.items()}
    only_ours, only_theirs = int((ours & ~theirs).sum()), int((theirs & ~ours).sum())
    percent = {k: 100 * r / n for k, r in robust.items()}
    inside = interval["torchattacks"][0] <= percent["capsbench"] <= interval["torchattacks"][1]
    shown = ", ".join(f"{k} Square {percent[k]:.1f} % [{interval[k][0]:.1f}, {interval[k][1]:.1f}]" for k in robust)
    return [f"{model} eps {eps:g} ({n} images): robust under {shown}; broken only by capsbench's {only_ours}, only by "
            f"torchattacks' {only_theirs}, McNemar p = {mcnemar_p(only_ours, only_theirs):.2g}",
            f"square_check {model} eps={eps:g} capsbench={percent['capsbench']:.1f} "
            f"torchattacks={percent['torchattacks']:.1f} within_interval={'yes' if inside else 'no'}"]


def smoke_model(name: str) -> Classifier:
    """`name` at the smoke budget's sizes for MNIST, seeded: small, so that thousands of queries per image take
    minutes on a CPU."""
    cfg = compose(parse_command_line(["budget=smoke"]), require_suite=False)
    spec = DATASETS.get("mnist")
    args = MODELS.get(name).arguments()
    args.update(OmegaConf.to_container(cfg.model_args).get(name) or {})
    args.update(in_channels=spec.in_channels, image_size=spec.image_size, num_classes=spec.num_classes)
    torch.manual_seed(0)
    return create_model(name, **args)


def digest(tensor: torch.Tensor) -> str:
    """SHA-256 of a tensor's bytes (contiguous, on the CPU)."""
    return hashlib.sha256(tensor.detach().cpu().contiguous().numpy().tobytes()).hexdigest()


def measure(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads or auto_threads())
    splits = load_splits("mnist", root=Path(args.data_root), download=False, val_size=5000)
    names = ("capsnet", "cnn_sabour")
    models = {name: smoke_model(name).to(args.device) for name in names}
    if args.weights is not None and args.weights.exists():
        states = torch.load(args.weights, weights_only=True, map_location=args.device)
        for name, model in models.items():
            model.load_state_dict(states[name])
    else:
        for model in models.values():
            train_briefly(model, splits.train_x, splits.train_y, args.train_images, args.device)
        if args.weights is not None:
            torch.save({name: model.state_dict() for name, model in models.items()}, args.weights)
    out = {"torchattacks": torchattacks.__version__, "torch": torch.__version__, "threads": torch.get_num_threads(),
           "device": args.device, "queries": args.queries, "models": {}}
    test_x = as_images(splits.test_x[: 4 * args.images], args.device)
    test_y = splits.test_y[: 4 * args.images].to(args.device)
    squares, lines = attacks(args.queries), []
    for name, model in models.items():
        model.eval()
        correct = (decisions(model, test_x) == test_y).nonzero().squeeze(1)[: args.images]
        images, labels, ids = test_x[correct], test_y[correct], correct.tolist()
        weights = hashlib.sha256(b"".join(v.cpu().numpy().tobytes() for v in model.state_dict().values())).hexdigest()
        entry = {"weights_sha256": weights, "ids": ids, "attacks": {}}
        runs = [(a, squares[a], args.eps) for a in SQUARES]
        if args.autoattack_eps:
            runs.append(("autoattack", build("autoattack"), args.autoattack_eps))
        results = {}
        for attack, instance, eps_values in runs:
            start = time.perf_counter()
            results[attack] = result = run(instance, model, images, labels, ids, eps_values)
            seconds = time.perf_counter() - start
            entry["attacks"][attack] = {
                str(eps): {"broken": result.broken[eps].int().tolist(),
                           "adversarial_sha256": digest(result.adversarial[eps])}
                for eps in eps_values
            }
            counts = ", ".join(f"eps {e:g}: {int(result.broken[e].sum())}/{len(ids)} broken" for e in eps_values)
            print(f"{name} {attack}: {counts} ({seconds:.0f} s)", flush=True)
        out["models"][name] = entry
        for eps in args.eps:
            lines += summary(name, eps, results["square"].broken[eps].cpu(),
                             results["torchattacks_square"].broken[eps].cpu())
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"torchattacks {torchattacks.__version__}, torch {torch.__version__}, {args.device}, {args.queries} queries, "
          "p_init 0.8, margin loss, seed 0")
    print("\n".join(lines))


def compare(a_path: Path, b_path: Path) -> int:
    a, b = json.loads(a_path.read_text()), json.loads(b_path.read_text())
    print(f"torchattacks {a['torchattacks']} vs {b['torchattacks']} (torch {a['torch']} / {b['torch']}, "
          f"{a['threads']} / {b['threads']} threads)")
    differ = 0
    for name, ma in a["models"].items():
        mb = b["models"][name]
        same_model = ma["weights_sha256"] == mb["weights_sha256"] and ma["ids"] == mb["ids"]
        differ += not same_model
        print(f"{name}: same weights and images: {same_model} ({len(ma['ids'])} images)")
        for attack, per_eps in ma["attacks"].items():
            for eps, ra in per_eps.items():
                rb = mb["attacks"][attack][eps]
                agree = sum(x == y for x, y in zip(ra["broken"], rb["broken"]))
                same_adv = ra["adversarial_sha256"] == rb["adversarial_sha256"]
                differ += agree != len(ra["broken"]) or not same_adv
                print(f"  {attack:19s} eps {float(eps):<5g} broken {sum(ra['broken']):3d} vs {sum(rb['broken']):3d}, "
                      f"per-image outcomes agree on {agree}/{len(ra['broken'])}, "
                      f"adversarial images identical: {same_adv}")
    print("identical" if differ == 0 else f"{differ} difference(s)")
    return 1 if differ else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="run capsbench's and torchattacks' Square (and AutoAttack, if asked)")
    m.add_argument("--out", type=Path, required=True, help="JSON file to write")
    m.add_argument("--weights", type=Path, default=None, help="the models' weights: read if present, else written")
    m.add_argument("--images", type=int, default=100, help="correctly classified test images per model")
    m.add_argument("--train-images", type=int, default=3200, help="training images when --weights is absent")
    m.add_argument("--eps", type=float, nargs="+", default=[0.1, 0.15, 0.2], help="the Squares' eps values")
    m.add_argument("--queries", type=int, default=300, help="queries after the first (quick budget: 300)")
    m.add_argument("--autoattack-eps", type=float, nargs="*", default=[], help="AutoAttack's eps values (none: skip)")
    m.add_argument("--data-root", default=os.environ.get("CAPSBENCH_DATA"), help="default: $CAPSBENCH_DATA")
    m.add_argument("--device", default="cpu")
    m.add_argument("--threads", type=int, default=None, help="CPU intra-op threads (default: capsbench's auto)")
    c = sub.add_parser("compare", help="compare two measure files")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = parser.parse_args()
    if args.command == "compare":
        sys.exit(compare(args.a, args.b))
    if args.data_root is None:
        parser.error("no MNIST: pass --data-root DIR or set CAPSBENCH_DATA (the directory holding MNIST/raw)")
    measure(args)


if __name__ == "__main__":
    main()
