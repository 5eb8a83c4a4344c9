"""Peak memory of one training step or one inference batch: CUDA peak allocated on GPU; on CPU the peak
RSS of a fresh subprocess (`python -m capsbench.cost.probe`), so allocator caches of earlier models cannot hide it."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from capsbench.util.precision import autocast

PROBE_TIMEOUT_S = 600


@dataclass
class StepSpec:
    """What one memory measurement runs: a model built from (name, args) at one batch size and mode."""

    model: str
    model_args: dict[str, Any]
    image_shape: tuple[int, int, int]
    batch: int
    mode: str  # "train": forward, loss, backward, Adam step; "infer": forward under no_grad, eval mode
    precision: str = "fp32"
    seed: int = 0


def run_step(model: nn.Module, spec: StepSpec, device: str) -> None:
    """One training step or one inference batch of random images in [0, 1] with random labels."""
    gen = torch.Generator().manual_seed(spec.seed)
    x = torch.rand(spec.batch, *spec.image_shape, generator=gen).to(device)
    num_classes = spec.model_args.get("num_classes", 10)
    y = torch.randint(0, num_classes, (spec.batch,), generator=gen).to(device)
    if spec.mode == "train":
        model.train()
        opt = torch.optim.Adam(model.parameters())
        with autocast(device, spec.precision):
            out = model(x, y)
            loss = model.loss(out, y, x)
        loss.backward()
        opt.step()
    elif spec.mode == "infer":
        model.eval()
        with torch.no_grad(), autocast(device, spec.precision):
            model(x)
    else:
        raise ValueError(f"mode must be 'train' or 'infer', got {spec.mode!r}")


def cuda_peak_bytes(model: nn.Module, spec: StepSpec, device: str) -> int:
    """torch.cuda.max_memory_allocated over one step (weights, activations, gradients, optimizer state)."""
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    run_step(model, spec, device)
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device)


@dataclass
class RssPeak:
    """Peak resident set size of the probe process during the step (bytes; VmHWM reset just before it),
    and how far the step raised it above the RSS just before the step (model built, inputs not yet made)."""

    peak: int
    step: int


def cpu_peak_rss(spec: StepSpec, *, timeout_s: float = PROBE_TIMEOUT_S) -> RssPeak:
    """Run the step in a fresh Python process and read its peak RSS."""
    cmd = [sys.executable, "-m", "capsbench.cost.probe", json.dumps(asdict(spec))]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise RuntimeError(
            f"memory probe for {spec.model} ({spec.mode}, batch {spec.batch}) ran past {timeout_s} s"
        ) from None
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"memory probe for {spec.model} ({spec.mode}, batch {spec.batch}) failed:\n{tail}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return RssPeak(peak=result["peak_rss"], step=result["step_rss"])
