"""Times capsbench's training step (forward, loss, backward, Adam step) for capsnet and cnn_sabour at the quick
budget's sizes against a plain reference written here, both in the same run, timed alternately so that machine
load hits both alike; prints images/s, the ratio per model and `train_speed ratio capsnet=X cnn_sabour=Y`.

Then the roofline: per model and precision (fp32, and bf16 where the device has it), the step's achieved GFLOP/s
(FLOPs counted by torch's FlopCounterMode) and those of its two dominant layers timed alone on the inputs they see in
the step, against the peak of a matmul probe measured in the same run; last, one `roofline <model> <precision>
step=X% <layer>=Y% ...` line each (fractions of that peak).

    uv run python benchmarks/train_speed.py [--quick] [--compile] [--device cuda] [--budget quick]

Target (not a test): capsbench at least as fast as the reference, and faster with --compile.
"""

from __future__ import annotations

import capsbench  # noqa: F401  (first: sets OMP_WAIT_POLICY before torch loads OpenMP)

# isort: split
import argparse
import os
import statistics
from collections.abc import Callable

import torch
from omegaconf import OmegaConf
from torch import nn
from torch.nn import functional as F

from capsbench.config.compose import compose
from capsbench.config.request import parse_command_line
from capsbench.config.schema import TrainConfig
from capsbench.cost.roofline import dominant_layers, layer_throughput, peak_flops, step_throughput
from capsbench.cost.timing import device_label, time_call
from capsbench.data import DATASETS
from capsbench.models import MODELS, Classifier, create_model
from capsbench.train.loop import make_optimizer
from capsbench.train.protocols import Batch
from capsbench.train.step import TrainStep, auto_threads
from capsbench.util.precision import autocast, cpu_bf16_instructions

MODELS_TIMED = ("capsnet", "cnn_sabour")


def squash(s: torch.Tensor) -> torch.Tensor:
    """Sabour et al.'s squash over the last dimension (eps inside the root, as capsbench)."""
    sq = (s * s).sum(dim=-1, keepdim=True)
    return sq / (1 + sq) * s / torch.sqrt(sq + 1e-8)


class ReferenceCapsNet(nn.Module):
    """Sabour et al.'s CapsNet (arXiv:1710.09829) as most public reimplementations write it: conv -> primary
    capsules -> votes by einsum -> dynamic routing as a Python loop -> label-masked FC decoder.
    Shapes: (B, C, H, W) -> lengths (B, classes), reconstructions (B, C, H, W)."""

    def __init__(
        self,
        *,
        in_channels: int,
        image_size: int,
        num_classes: int,
        conv_channels: int,
        primary_types: int,
        primary_dim: int,
        class_dim: int,
        routing_iterations: int,
        decoder_hidden: list[int],
        recon_weight: float,
    ):
        super().__init__()
        self.types, self.dim, self.iterations, self.recon_weight = (
            primary_types,
            primary_dim,
            routing_iterations,
            recon_weight,
        )
        self.conv = nn.Conv2d(in_channels, conv_channels, 9)
        self.primary = nn.Conv2d(conv_channels, primary_types * primary_dim, 9, stride=2)
        grid = (image_size - 8 - 9) // 2 + 1
        self.weight = nn.Parameter(0.01 * torch.randn(primary_types * grid * grid, num_classes, class_dim, primary_dim))
        sizes = [num_classes * class_dim, *decoder_hidden]
        layers: list[nn.Module] = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        self.decoder = nn.Sequential(*layers, nn.Linear(sizes[-1], in_channels * image_size * image_size), nn.Sigmoid())

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.primary(F.relu(self.conv(x)))  # (B, types * dim, g, g)
        b, _, g, _ = h.shape
        u = squash(
            h.view(b, self.types, self.dim, g, g).permute(0, 1, 3, 4, 2).reshape(b, -1, self.dim)
        )  # (B, in, dim)
        u_hat = torch.einsum("ijdk,bik->bijd", self.weight, u)  # (B, in, out, D)
        logits = torch.zeros(u_hat.shape[:3], device=x.device)  # (B, in, out)
        for r in range(self.iterations):
            c = torch.softmax(logits, dim=2)
            v = squash((c.unsqueeze(-1) * u_hat).sum(dim=1))  # (B, out, D)
            if r < self.iterations - 1:
                logits = logits + (u_hat * v.unsqueeze(1)).sum(dim=-1)
        mask = F.one_hot(labels, v.shape[1]).to(v.dtype).unsqueeze(-1)
        return v.norm(dim=-1), self.decoder((v * mask).flatten(1)).view_as(x)

    def loss(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        lengths, recon = self(x, labels)
        t = F.one_hot(labels, lengths.shape[1]).to(lengths.dtype)
        margin = (t * F.relu(0.9 - lengths) ** 2 + 0.5 * (1 - t) * F.relu(lengths - 0.1) ** 2).sum(dim=1).mean()
        return margin + self.recon_weight * ((recon - x) ** 2).flatten(1).sum(dim=1).mean()


class ReferenceCNN(nn.Module):
    """Sabour et al.'s baseline CNN: convs (ReLU), FC layers (ReLU), dropout, class layer; cross-entropy.
    Shapes: (B, C, H, W) -> logits (B, classes)."""

    def __init__(
        self,
        *,
        in_channels: int,
        image_size: int,
        num_classes: int,
        channels: list[int],
        kernel_size: int,
        padding: str,
        fc: list[int],
        dropout: float,
        mean: float,
        std: float,
    ):
        super().__init__()
        self.mean, self.std = mean, std
        convs, prev, size = [], in_channels, image_size
        for ch in channels:
            convs += [nn.Conv2d(prev, ch, kernel_size, padding=padding), nn.ReLU()]
            prev, size = ch, size if padding == "same" else size - kernel_size + 1
        self.features = nn.Sequential(*convs)
        dims, layers = [prev * size * size, *fc], []
        for a, b in zip(dims[:-1], dims[1:]):
            layers += [nn.Linear(a, b), nn.ReLU()]
        self.classifier = nn.Sequential(*layers, nn.Dropout(dropout), nn.Linear(dims[-1], num_classes))

    def loss(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.classifier(self.features((x - self.mean) / self.std).flatten(1)), labels)


def reference_for(name: str, model: Classifier, args: dict) -> nn.Module:
    """The reference twin of capsbench `model`, holding a copy of its weights."""
    keys = ("in_channels", "image_size", "num_classes")
    if name == "capsnet":
        ref = ReferenceCapsNet(
            **{
                k: args[k]
                for k in (
                    *keys,
                    "conv_channels",
                    "primary_types",
                    "primary_dim",
                    "class_dim",
                    "routing_iterations",
                    "decoder_hidden",
                    "recon_weight",
                )
            }
        )
        state = {k: v for k, v in model.state_dict().items() if k != "votes.weight"}
        state = {
            k.replace("primary.conv.", "primary.").replace("decoder.net.", "decoder."): v for k, v in state.items()
        }
        w = model.votes.weight.detach()  # (in, D_in, out * D)
        state["weight"] = w.view(w.shape[0], w.shape[1], model.votes.out_caps, model.votes.out_dim).permute(0, 2, 3, 1)
    else:
        ref = ReferenceCNN(
            **{k: args[k] for k in (*keys, "channels", "kernel_size", "padding", "fc", "dropout", "mean", "std")}
        )
        state = model.state_dict()
    ref.load_state_dict(state)
    return ref.to(next(model.parameters()).device)


def quick_args(name: str, budget: str) -> dict:
    """Constructor arguments of `name` at the budget's sizes, read through capsbench's config, on MNIST."""
    cfg = compose(parse_command_line([f"budget={budget}"]), require_suite=False)
    spec = DATASETS.get("mnist")
    args = MODELS.get(name).arguments()
    args.update(OmegaConf.to_container(cfg.model_args).get(name) or {})
    args.update(in_channels=spec.in_channels, image_size=spec.image_size, num_classes=spec.num_classes)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in args.items()}


def loss_gap(name: str, args: dict, device: str, batch: int = 8) -> float:
    """|capsbench loss - reference loss| on one random batch at identical weights (eval mode: no dropout)."""
    torch.manual_seed(1)
    model = create_model(name, **args).to(device).eval()
    ref = reference_for(name, model, args).eval()
    images = torch.rand(batch, args["in_channels"], args["image_size"], args["image_size"], device=device)
    labels = torch.randint(0, args["num_classes"], (batch,), device=device)
    with torch.no_grad():
        ours = model.loss(model(images, labels), labels, images)
        return (ours - ref.loss(images, labels)).abs().item()


def steps_for(
    name: str, args: dict, batch: int, lr: float, device: str, compiled: bool
) -> dict[str, Callable[[], object]]:
    """Training-step closures on one fixed batch: capsbench (eager, and compiled when asked) and the reference."""
    torch.manual_seed(0)
    images = torch.rand(batch, args["in_channels"], args["image_size"], args["image_size"], device=device)
    labels = torch.randint(0, args["num_classes"], (batch,), device=device)
    steps: dict[str, Callable[[], object]] = {}
    for label, compile_model in (("capsbench", False), ("capsbench+compile", True))[: 1 + compiled]:
        model = create_model(name, **args).to(device)
        step = TrainStep(
            model,
            make_optimizer(model.parameters(), TrainConfig(lr=lr), device)[0],
            device=device,
            compile_model=compile_model,
        )
        steps[label] = lambda step=step: step(Batch(images, labels))
    ref = reference_for(name, create_model(name, **args), args).to(device)
    opt = torch.optim.Adam(ref.parameters(), lr=lr)

    def reference_step() -> None:
        loss = ref.loss(images, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()

    steps["reference"] = reference_step
    return steps


def interleaved_seconds(
    steps: dict[str, Callable[[], object]], device: str, warmup: int, rounds: int, per_round: int
) -> dict[str, float]:
    """Median seconds per step of each closure, timed round-robin: every round runs each closure `per_round` times."""
    for step in steps.values():  # warm-up (and compilation) outside the timed rounds
        time_call(step, device=device, warmup=warmup, repeats=0)
    times: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(rounds):
        for k, step in steps.items():
            times[k].append(statistics.fmean(time_call(step, device=device, warmup=0, repeats=per_round)))
    return {k: statistics.median(v) for k, v in times.items()}


def roofline(name: str, args: dict, batch: int, lr: float, device: str, precision: str, peak: float,
             repeats: int) -> str:
    """Print the step's and its dominant layers' throughput against `peak`; return the summary line."""
    torch.manual_seed(0)
    images = torch.rand(batch, args["in_channels"], args["image_size"], args["image_size"], device=device)
    labels = torch.randint(0, args["num_classes"], (batch,), device=device)
    model = create_model(name, **args).to(device)
    step = TrainStep(model, make_optimizer(model.parameters(), TrainConfig(lr=lr), device)[0], device=device,
                     precision=precision)
    whole = step_throughput(f"{name} {precision} training step", lambda: step(Batch(images, labels)), device=device,
                            peak=peak, repeats=repeats)
    print(f"  {whole.line()}")
    parts = []

    def forward() -> None:
        with autocast(device, precision):
            model(images, labels)

    for layer, module, inputs in dominant_layers(model, forward, k=2):
        measured = layer_throughput(f"{name} {precision} {layer} (forward + backward)", module, inputs, device=device,
                                    precision=precision, peak=peak, repeats=repeats)
        print(f"  {measured.line()}")
        parts.append(f"{layer}={100 * measured.fraction:.0f}%")
    return f"roofline {name} {precision} step={100 * whole.fraction:.0f}% {' '.join(parts)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer rounds: under a minute on a 2-core CPU")
    parser.add_argument("--compile", action="store_true", help="also time capsbench with train.compile=true")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--budget", default="quick", help="whose model sizes and batch size to use")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU intra-op threads (default: as capsbench runs with threads=null, torch's default capped "
        "by the CPUs this process may use)",
    )
    args = parser.parse_args()
    rounds, per_round = (3, 2) if args.quick else (9, 3)
    cfg = compose(parse_command_line([f"budget={args.budget}"]), require_suite=False)
    ratios, compiled = {}, {}
    threads = args.threads or auto_threads()
    torch.set_num_threads(threads)
    print(
        f"device: {device_label(args.device)} (OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}); "
        f"torch {torch.__version__}; batch {cfg.train.batch_size}; {args.budget} budget sizes; "
        f"{rounds} rounds x {per_round} steps, alternating"
    )
    for name in MODELS_TIMED:
        model_args = quick_args(name, args.budget)
        print(
            f"{name:10s} |capsbench loss - reference loss| at identical weights: "
            f"{loss_gap(name, model_args, args.device):.1e}"
        )
        steps = steps_for(name, model_args, cfg.train.batch_size, cfg.train.lr, args.device, args.compile)
        seconds = interleaved_seconds(steps, args.device, warmup=2, rounds=rounds, per_round=per_round)
        for label, s in seconds.items():
            print(f"{name:10s} {label:18s} {cfg.train.batch_size / s:8.1f} images/s  ({1e3 * s:.1f} ms/step)")
        ratios[name] = seconds["reference"] / seconds["capsbench"]
        if args.compile:
            compiled[name] = seconds["reference"] / seconds["capsbench+compile"]
    print("the machine may be shared with other jobs: compare the interleaved ratios, not absolute numbers")
    print(f"target capsbench >= reference: {'met' if min(ratios.values()) >= 1.0 else 'NOT met'}")
    if compiled:
        print(
            f"compiled ratio {' '.join(f'{k}={v:.2f}' for k, v in compiled.items())}; target faster with compile: "
            f"{'met' if all(compiled[k] > 1.0 for k in compiled) else 'NOT met'}"
        )
    print(f"train_speed ratio {' '.join(f'{k}={v:.2f}' for k, v in ratios.items())}")
    precisions = ["fp32"] + (["bf16"] if args.device.startswith("cuda") or cpu_bf16_instructions() else [])
    summary = []
    for precision in precisions:
        peak = peak_flops(args.device, precision)
        print(f"roofline, {precision}: measured peak {peak / 1e9:.0f} GFLOP/s (square matmul probe, best of 5)")
        for name in MODELS_TIMED:
            summary.append(roofline(name, quick_args(name, args.budget), cfg.train.batch_size, cfg.train.lr,
                                    args.device, precision, peak, repeats=per_round + 1))
    if len(precisions) == 1:
        print("bf16: this CPU reports no bf16 instructions (AVX512-BF16, AMX-BF16); fp32 only")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
