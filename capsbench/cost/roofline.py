"""How close a computation runs to the machine's limit: its FLOPs counted by torch's FlopCounterMode, its time
measured, and the machine's peak for the precision measured in the same run by a matmul probe (never a spec sheet);
for memory-bound work, the bytes it moves over the measured copy rate. Dominant layers are timed on their own, on
the inputs they see inside the step."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from capsbench.cost.timing import time_call
from capsbench.util.precision import autocast

PROBE_SIZE = {"cpu": 1024, "cuda": 8192}  # square matmul side: long enough to reach the peak, short to run


@dataclass(frozen=True)
class Throughput:
    """`flops` per call done in `seconds`, against a measured `peak` (FLOP/s)."""

    name: str
    flops: float
    seconds: float
    peak: float

    @property
    def gflops(self) -> float:
        return self.flops / self.seconds / 1e9

    @property
    def fraction(self) -> float:
        return self.flops / self.seconds / self.peak

    def line(self) -> str:
        return (f"{self.name}: {self.flops / 1e9:.2f} GFLOP in {1e3 * self.seconds:.1f} ms = {self.gflops:.1f} "
                f"GFLOP/s, {100 * self.fraction:.0f} % of the measured peak {self.peak / 1e9:.0f} GFLOP/s")


def _dtype(precision: str) -> torch.dtype:
    return torch.bfloat16 if precision == "bf16" else torch.float32


def peak_flops(device: str, precision: str, *, repeats: int = 5) -> float:
    """FLOP/s of a square matmul in the precision's dtype on `device`: the best of `repeats` timed calls (a peak is
    what the hardware can reach, so the best, not the median)."""
    n = PROBE_SIZE["cuda" if device.startswith("cuda") else "cpu"]
    a = torch.randn(n, n, device=device, dtype=_dtype(precision))
    b = torch.randn(n, n, device=device, dtype=_dtype(precision))
    return 2.0 * n**3 / min(time_call(lambda: a @ b, device=device, warmup=2, repeats=repeats))


def copy_bytes_per_second(device: str, *, mib: int = 256, repeats: int = 5) -> float:
    """Bytes moved per second by a device-to-device copy of `mib` MiB (read + write counted): the memory roof."""
    src = torch.empty(mib * 2**20 // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    seconds = min(time_call(lambda: dst.copy_(src), device=device, warmup=2, repeats=repeats))
    return 2.0 * src.numel() * 4 / seconds


def counted_flops(fn: Callable[[], object]) -> float:
    """FLOPs of one call of `fn` as FlopCounterMode counts them (matmuls and convolutions, forward and backward)."""
    with FlopCounterMode(display=False) as counter:
        fn()
    return float(counter.get_total_flops())


def step_throughput(name: str, step: Callable[[], object], *, device: str, peak: float, warmup: int = 2,
                    repeats: int = 5) -> Throughput:
    """A whole step (e.g. forward, loss, backward, optimizer step) against the peak."""
    seconds = min(time_call(step, device=device, warmup=warmup, repeats=repeats))
    return Throughput(name, counted_flops(step), seconds, peak)


def dominant_layers(model: nn.Module, forward: Callable[[], object], k: int = 2) -> list[tuple[str, nn.Module, tuple]]:
    """The k leaf modules with the most FLOPs in one forward pass, with the inputs they received there."""
    inputs: dict[str, tuple] = {}

    def keep(name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple, output: object) -> None:
            # detached copies that remember whether the step differentiates them (the first layer's input: no)
            inputs.setdefault(name, tuple(a.detach().requires_grad_(a.requires_grad) for a in args))
        return hook

    hooks = [m.register_forward_hook(keep(n)) for n, m in model.named_modules() if not list(m.children())]
    try:
        flops: dict[str, float] = {}
        with FlopCounterMode(display=False) as counter:
            forward()
        for module_name, counts in counter.get_flop_counts().items():
            name = module_name.partition(".")[2]  # FlopCounterMode names modules "Global.<path>"
            if name in inputs:
                flops[name] = float(sum(counts.values()))
    finally:
        for hook in hooks:
            hook.remove()
    modules = dict(model.named_modules())
    top = sorted(flops, key=flops.get, reverse=True)[:k]
    return [(name, modules[name], inputs[name]) for name in top]


def layer_throughput(name: str, module: nn.Module, inputs: tuple, *, device: str, precision: str, peak: float,
                     repeats: int = 5) -> Throughput:
    """One layer's forward + backward (to its parameters, and to its inputs where the step needs that) on its captured
    inputs, against the peak."""
    xs = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]

    def step() -> None:
        with autocast(device, precision):
            out = module(*xs)
        out = out[0] if isinstance(out, tuple) else out
        out.float().sum().backward()

    return step_throughput(name, step, device=device, peak=peak, warmup=2, repeats=repeats)


def bandwidth_fraction(bytes_moved: float, seconds: float, roof: float) -> str:
    """`bytes_moved` in `seconds` against the measured copy rate, in words."""
    rate = bytes_moved / seconds
    return f"{bytes_moved / 2**20:.1f} MiB in {1e3 * seconds:.2f} ms = {rate / 1e9:.1f} GB/s, " \
           f"{100 * rate / roof:.0f} % of the measured copy rate {roof / 1e9:.1f} GB/s"
