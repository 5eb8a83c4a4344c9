"""Times PGD-20 on capsnet through capsbench's row engine (capsbench.attacks.run_attack, early exit off and on)
against a plain forward-and-gradient PGD loop written here, at the same batch (the engine's pool holds as many rows
as the loop's batch has images), on the same model and MNIST test images, timed alternately so that machine load hits
all alike; prints images/s, the ratios, how far the three agree on which images broke and, last,
`attack_speed pgd20 capsnet images_per_s=X ratio=Y` (the engine with early exit, the default; ratio: its images/s
over the plain loop's). Before it, the roofline of one attack step (forward and input gradient on the batch): its
GFLOP/s against a matmul probe's peak measured in the same run.

    CAPSBENCH_DATA=DIR uv run python benchmarks/attack_speed.py [--quick] [--checkpoint PATH] [--device cuda]

The attack is capsbench's `pgd` at eps 0.1: 20 sign steps of 2.5 eps / 20 from a random start on cross-entropy of
the log-normalised capsule lengths, then the margin loss on the images cross-entropy left unbroken; an image is
broken when the model's decision at any iterate differs from its label. The engine runs as the robustness suite runs
it on the device: on a CPU it reads the device after every iterate; on a GPU every 8 iterates, with the margin rows
entering before the cross-entropy rows have finished where the pool has room (speculation). The plain loop does the
same on the whole batch at every step (no early exit), drawing its random starts from capsbench's start_noise so the
three runs attack from the same points. Without --checkpoint, capsnet at the quick budget's sizes is trained here for
a few thousand images (seed 0), and the attacked images are the first test images it classifies correctly.
"""

from __future__ import annotations

import capsbench  # noqa: F401  (first: sets OMP_WAIT_POLICY before torch loads OpenMP)

# isort: split
import argparse
import os
import statistics
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf
from torch.nn import functional as F

from capsbench.attacks import EngineSettings, build, decisions, run_attack
from capsbench.attacks.base import start_noise
from capsbench.config.compose import compose
from capsbench.config.request import parse_command_line
from capsbench.config.schema import TrainConfig
from capsbench.cost.roofline import peak_flops, step_throughput
from capsbench.cost.timing import device_label
from capsbench.data import DATASETS, as_images, batches, load_splits
from capsbench.models import MODELS, Classifier, create_model
from capsbench.suites.robustness.phases import COMPACT_EVERY_GPU
from capsbench.train.loop import make_optimizer
from capsbench.train.step import auto_threads

EPS, STEPS, STEP_RATIO = 0.1, 20, 2.5


def quick_capsnet(device: str) -> tuple[Classifier, dict]:
    """capsnet at the quick budget's sizes for MNIST, seeded."""
    cfg = compose(parse_command_line(["budget=quick"]), require_suite=False)
    spec = DATASETS.get("mnist")
    args = MODELS.get("capsnet").arguments()
    args.update(OmegaConf.to_container(cfg.model_args).get("capsnet") or {})
    args.update(in_channels=spec.in_channels, image_size=spec.image_size, num_classes=spec.num_classes)
    torch.manual_seed(0)
    return create_model("capsnet", **args).to(device), args


def train_briefly(model: Classifier, train_x: torch.Tensor, train_y: torch.Tensor, images: int, device: str) -> None:
    """A few hundred Adam steps on unshifted training images: a model that classifies most digits, so that the
    attack meets images that resist some steps (an untrained model's decisions flip at the first step)."""
    opt = make_optimizer(model.parameters(), TrainConfig(lr=1e-3), device)[0]
    model.train()
    gen = torch.Generator().manual_seed(0)
    for x, y in batches(train_x[:images], train_y[:images], 64, device=device, shuffle_generator=gen):
        loss = model.loss(model(x, y), y, x)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    model.eval()


def log_normalised(lengths: torch.Tensor) -> torch.Tensor:
    """log(l / sum l), with capsbench's epsilon: the logits a cross-entropy attack on capsule lengths uses."""
    return torch.log(lengths + 1e-8) - torch.log(lengths.sum(dim=1, keepdim=True) + 1e-8)


def plain_pgd(model: Classifier, images: torch.Tensor, labels: torch.Tensor, ids: torch.Tensor, seed: int,
              eps: float = EPS) -> torch.Tensor:
    """PGD as a straightforward loop over the whole batch: cross-entropy, then the margin loss on what it left
    unbroken; every iterate's decision counts. Returns broken (N,)."""
    broken = torch.zeros(len(images), dtype=torch.bool, device=images.device)
    step = STEP_RATIO * eps / STEPS
    for loss_name in ("ce", "margin"):
        todo = (~broken).nonzero().squeeze(1)
        if len(todo) == 0:
            break
        x0, y = images[todo], labels[todo]
        noise = start_noise(ids[todo.cpu()], tuple(images.shape[1:]), seed=seed, stream=f"{loss_name}/0",
                            device=images.device)  # capsbench's per-image starts: the same points as its PGD
        x = torch.min(torch.max(x0 + eps * noise, x0 - eps), x0 + eps).clamp(0.0, 1.0)
        hit = torch.zeros(len(todo), dtype=torch.bool, device=images.device)
        for t in range(STEPS + 1):
            x.requires_grad_(t < STEPS)
            with torch.set_grad_enabled(t < STEPS):
                logits = log_normalised(model(x).scores)
            hit |= logits.argmax(dim=1) != y
            if t == STEPS:
                break
            if loss_name == "ce":
                loss = F.cross_entropy(logits, y, reduction="sum")
            else:  # Carlini-Wagner margin: best other logit minus the true one
                others = logits.masked_fill(F.one_hot(y, logits.shape[1]).bool(), float("-inf"))
                loss = (others.amax(dim=1) - logits.gather(1, y[:, None]).squeeze(1)).sum()
            (grad,) = torch.autograd.grad(loss, x)
            x = torch.min(torch.max(x.detach() + step * grad.sign(), x0 - eps), x0 + eps).clamp(0.0, 1.0)
        broken[todo] = hit
    return broken


def capsbench_pgd(model: Classifier, images: torch.Tensor, labels: torch.Tensor, ids: torch.Tensor, seed: int,
                  early_exit: bool, eps: float = EPS) -> torch.Tensor:
    """capsbench's `pgd` attack with one restart at one eps, through the row engine with a pool of one row per image
    (the plain loop's batch), reading the device and speculating as the suite does on the images' device. Returns
    broken (N,)."""
    gpu = images.device.type == "cuda"
    settings = EngineSettings(num_classes=10, seed=seed, batch_size=len(images), early_exit=early_exit,
                              compact_every=COMPACT_EVERY_GPU if gpu else 1, speculate=gpu)
    attack = build("pgd", {"steps": STEPS, "step_ratio": STEP_RATIO, "restarts": 1})
    return run_attack(model, attack, images, labels, ids.tolist(), [eps], settings).broken[eps].to(images.device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="50 images, 3,200 training images: about a minute and a half on a shared 2-core CPU")
    parser.add_argument("--images", type=int, default=None, help="images attacked (default 200, --quick 50)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds, each runs all three in a rotating order")
    parser.add_argument("--checkpoint", type=Path, help="a capsbench capsnet checkpoint (.pt) instead of training here")
    parser.add_argument("--train-images", type=int, default=None,
                        help="training images without --checkpoint (default 6,400, --quick 3,200)")
    parser.add_argument("--data-root", default=os.environ.get("CAPSBENCH_DATA"), help="default: $CAPSBENCH_DATA")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=None, help="CPU intra-op threads (default: capsbench's auto)")
    args = parser.parse_args()
    n_images, rounds = args.images or (50 if args.quick else 200), args.rounds
    train_images = args.train_images or (3200 if args.quick else 6400)
    torch.set_num_threads(args.threads or auto_threads())
    if args.data_root is None:
        parser.error("no MNIST: pass --data-root DIR or set CAPSBENCH_DATA (the directory holding MNIST/raw)")
    started = time.perf_counter()
    splits = load_splits("mnist", root=Path(args.data_root), download=False, val_size=5000)
    loaded = time.perf_counter() - started

    start = time.perf_counter()
    if args.checkpoint is not None:
        blob = torch.load(args.checkpoint, weights_only=True, map_location=args.device)
        model = create_model("capsnet", **blob["meta"]["identity"]["model_args"]).to(args.device)
        model.load_state_dict(blob["state_dict"])
        model.eval()
        origin = f"checkpoint {args.checkpoint}"
    else:
        model, _ = quick_capsnet(args.device)
        train_briefly(model, splits.train_x, splits.train_y, train_images, args.device)
        origin = f"quick-size capsnet trained here on {train_images} images ({time.perf_counter() - start:.0f} s)"
    test_x = as_images(splits.test_x[: 4 * n_images], args.device)
    test_y = splits.test_y[: 4 * n_images].to(args.device)
    correct = (decisions(model, test_x) == test_y).nonzero().squeeze(1)[:n_images]
    if len(correct) < n_images:
        raise SystemExit(
            f"only {len(correct)} of the first {4 * n_images} test images are classified correctly; "
            "train longer (--train-images) or pass --checkpoint"
        )
    images, labels, ids = test_x[correct], test_y[correct], correct.cpu()
    accuracy = len(correct) / (int(correct[-1]) + 1)
    print(
        f"device: {device_label(args.device)} (OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}); "
        f"torch {torch.__version__}; MNIST loaded in {loaded:.0f} s; {origin}; "
        f"clean accuracy {100 * accuracy:.1f} % on the first test images"
    )
    print(
        f"PGD-{STEPS} at eps {EPS} on {n_images} correctly classified test images, the engine's pool and the plain "
        f"loop's batch {n_images} rows; {rounds} round(s), the three runs alternating in each, first in turn"
    )

    runs = {
        "capsbench early_exit=off": lambda: capsbench_pgd(model, images, labels, ids, 0, early_exit=False),
        "capsbench early_exit=on": lambda: capsbench_pgd(model, images, labels, ids, 0, early_exit=True),
        "plain loop": lambda: plain_pgd(model, images, labels, ids, 0),
    }
    capsbench_pgd(model, images[:4], labels[:4], ids[:4], 0, early_exit=False)  # warm-up: first-call overheads
    plain_pgd(model, images[:4], labels[:4], ids[:4], 0)
    seconds: dict[str, list[float]] = {k: [] for k in runs}
    cpu: dict[str, list[float]] = {k: [] for k in runs}  # this process's CPU seconds: less sensitive to other jobs
    broken: dict[str, torch.Tensor] = {}
    names = list(runs)
    for r in range(rounds):
        for name in names[r % 3 :] + names[: r % 3]:  # each run goes first in some round: load drifts hit all alike
            run = runs[name]
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            t0, c0 = time.perf_counter(), time.process_time()
            broken[name] = run().cpu()
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            seconds[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    speed = {k: n_images / statistics.median(v) for k, v in seconds.items()}
    reference = speed["plain loop"]
    for name, ips in speed.items():
        print(
            f"{name:26s} {ips:8.1f} images/s  ({statistics.median(seconds[name]):.1f} s wall, "
            f"{statistics.median(cpu[name]):.1f} CPU s, median of {rounds})  ratio {ips / reference:.2f}  "
            f"broken {int(broken[name].sum())}/{n_images}"
        )
    plain = broken["plain loop"]
    agree = (broken["capsbench early_exit=on"] == plain) & (broken["capsbench early_exit=off"] == plain)
    print(f"the three agree on {int(agree.sum())}/{n_images} images (a disagreement is a float tie at some iterate)")
    print("the machine may be shared with other jobs: compare the interleaved ratios, not absolute numbers")
    xs = images.clone().requires_grad_()

    def attack_step() -> None:
        x = xs + 0.0  # the model's input a non-leaf: FlopCounterMode's module hooks refuse autograd.grad on a leaf
        loss = F.cross_entropy(log_normalised(model(x).scores), labels)
        torch.autograd.grad(loss, xs)

    peak = peak_flops(args.device, "fp32")
    step = step_throughput(f"one PGD step on {n_images} images (forward + input gradient)", attack_step,
                           device=args.device, peak=peak)
    print(f"roofline: {step.line()}")
    fast = speed["capsbench early_exit=on"]
    print(f"attack_speed pgd{STEPS} capsnet images_per_s={fast:.1f} ratio={fast / reference:.2f}")


if __name__ == "__main__":
    main()
