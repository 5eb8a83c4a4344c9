"""Do torchattacks 3.3.0 and 3.5.1 give capsbench the same Square and AutoAttack? Run `measure` once in an environment
with each version (same torch, same capsbench code), then `compare` the two files.

    CAPSBENCH_DATA=DIR python benchmarks/torchattacks_versions.py measure --out A.json --weights W.pt
    CAPSBENCH_DATA=DIR python benchmarks/torchattacks_versions.py compare A.json B.json

`measure` trains smoke-size capsnet and cnn_sabour briefly (seed 0; or loads them from --weights when that file
exists, and writes it otherwise, so that the second environment attacks the very same weights), takes the first
--images test images each classifies correctly, and runs capsbench's `square` attack (params.square_queries
queries, margin loss, seed 0) at each --eps and its assembled standard `autoattack` (APGD-CE, APGD-T, FAB-T at 100
iterations, Square at 5000 queries) at --autoattack-eps through capsbench.attacks. It writes, per model, attack and
eps, which images were broken and a SHA-256 of the adversarial images' bytes. `compare` prints per attack whether
the broken images and the adversarial images are identical and exits 1 when anything differs.
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

from capsbench.attacks import ATTACKS, AttackSettings, decisions
from capsbench.config.compose import compose
from capsbench.config.request import parse_command_line
from capsbench.data import DATASETS, as_images, load_splits
from capsbench.models import MODELS, Classifier, create_model
from capsbench.train.step import auto_threads


def smoke_model(name: str) -> Classifier:
    """`name` at the smoke budget's sizes for MNIST, seeded: small, so that AutoAttack's thousands of passes per image
    take minutes on a CPU; what is compared is torchattacks' code, not the model."""
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
    models = {name: smoke_model(name) for name in names}
    if args.weights.exists():
        states = torch.load(args.weights, weights_only=True)
        for name, model in models.items():
            model.load_state_dict(states[name])
    else:
        for model in models.values():
            train_briefly(model, splits.train_x, splits.train_y, args.train_images, "cpu")
        torch.save({name: model.state_dict() for name, model in models.items()}, args.weights)
    out = {"torchattacks": torchattacks.__version__, "torch": torch.__version__, "threads": torch.get_num_threads(),
           "models": {}}
    test_x, test_y = as_images(splits.test_x[: 4 * args.images], "cpu"), splits.test_y[: 4 * args.images]
    for name, model in models.items():
        model.eval()
        correct = (decisions(model, test_x) == test_y).nonzero().squeeze(1)[: args.images]
        images, labels = test_x[correct], test_y[correct]
        settings = AttackSettings(steps=0, step_ratio=2.5, restarts=1, square_queries=args.square_queries,
                                  num_classes=10, seed=0)
        weights = hashlib.sha256(b"".join(v.numpy().tobytes() for v in model.state_dict().values())).hexdigest()
        entry = {"weights_sha256": weights, "ids": correct.tolist(), "attacks": {}}
        for attack, eps_values in (("square", args.eps), ("autoattack", args.autoattack_eps)):
            start = time.perf_counter()
            result = ATTACKS.get(attack).run(model, images, labels, correct, eps_values, settings)
            seconds = time.perf_counter() - start
            entry["attacks"][attack] = {
                str(eps): {"broken": result.broken[eps].int().tolist(),
                           "adversarial_sha256": digest(result.adversarial[eps])}
                for eps in eps_values
            }
            counts = ", ".join(f"eps {e:g}: {int(result.broken[e].sum())}/{len(correct)} broken" for e in eps_values)
            print(f"torchattacks {torchattacks.__version__} {name} {attack}: {counts} ({seconds:.0f} s)", flush=True)
        out["models"][name] = entry
    args.out.write_text(json.dumps(out, indent=1) + "\n")


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
                print(f"  {attack:10s} eps {float(eps):<5g} broken {sum(ra['broken']):3d} vs {sum(rb['broken']):3d}, "
                      f"per-image outcomes agree on {agree}/{len(ra['broken'])}, "
                      f"adversarial images identical: {same_adv}")
    print("identical" if differ == 0 else f"{differ} difference(s)")
    return 1 if differ else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="run Square and AutoAttack with the installed torchattacks")
    m.add_argument("--out", type=Path, required=True, help="JSON file to write")
    m.add_argument("--weights", type=Path, required=True, help="the models' weights: read if present, else written")
    m.add_argument("--images", type=int, default=100, help="correctly classified test images per model")
    m.add_argument("--train-images", type=int, default=3200, help="training images when --weights is absent")
    m.add_argument("--eps", type=float, nargs="+", default=[0.1, 0.15, 0.2], help="Square's eps values")
    m.add_argument("--square-queries", type=int, default=300, help="Square's queries (quick budget: 300)")
    m.add_argument("--autoattack-eps", type=float, nargs="+", default=[0.1], help="AutoAttack's eps values")
    m.add_argument("--data-root", default=os.environ.get("CAPSBENCH_DATA"), help="default: $CAPSBENCH_DATA")
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
