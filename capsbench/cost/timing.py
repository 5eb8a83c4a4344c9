"""Latency: warm-up, then the median of repeated calls, timed with CUDA events on GPU (perf_counter after a
synchronise otherwise); per-routing-iteration cost by a least-squares slope over r and by CUDA events."""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from capsbench.util.precision import dtype_label

TIMING = ("device", "dtype", "host_load")  # how a timing was taken: record fields a table states under it


def device_label(device: str) -> str:
    """Device name, with the TF32 state on CUDA (matmul TF32 changes fp32 results and speed)."""
    if device.startswith("cuda"):
        tf32 = "on" if torch.backends.cuda.matmul.allow_tf32 else "off"
        return f"{torch.cuda.get_device_name(torch.device(device))}, tf32 {tf32}"
    return f"cpu {platform.machine()}, {torch.get_num_threads()} threads"


def host_load() -> str:
    """The machine's 1-minute load average (runnable tasks, this process's own included) against the CPUs this process
    may use, read as a unit's timing begins: a latency timed beside other work reads slower, and not by one factor for
    every model. "2.1 on 2 CPUs"; "unknown" where the system keeps no load average."""
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return "unknown"
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{load:.1f} on {cpus} CPUs"


def how_timed(device: str, precision: str) -> dict[str, str]:
    """The TIMING fields of a unit's timed records: its device, dtype and the host load as its timing begins."""
    return {"device": device_label(device), "dtype": dtype_label(precision), "host_load": host_load()}


def time_call(fn: Callable[[], object], *, device: str, warmup: int, repeats: int) -> list[float]:
    """Seconds per call of `fn`, `repeats` times after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if device.startswith("cuda"):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            begin = time.perf_counter()
            fn()
            times.append(time.perf_counter() - begin)
    return times


def median_seconds(fn: Callable[[], object], *, device: str, warmup: int, repeats: int) -> float:
    """Median wall time of `fn` over `repeats` calls after `warmup` calls (CUDA-synchronised on GPU)."""
    return statistics.median(time_call(fn, device=device, warmup=warmup, repeats=repeats))


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope) of ys against xs; needs two distinct xs."""
    if len(set(xs)) < 2:
        raise ValueError(f"a slope needs at least two distinct x values, got {xs}")
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


@dataclass
class IterationTiming:
    """Routing-module latency at r = 1..N (seconds), the fitted per-iteration slope and intercept, and on
    CUDA the mean per-iteration time from events recorded between iterations."""

    seconds: dict[int, float]
    slope: float
    intercept: float
    events: float | None


def routing_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Iterative routing modules: cost_part "routing" and an integer `iterations` attribute."""
    return [
        (name, m) for name, m in model.named_modules()
        if getattr(m, "cost_part", None) == "routing" and isinstance(getattr(m, "iterations", None), int)
    ]


def routing_inputs(model: nn.Module, module: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The inputs `module` receives when `model` sees `x` (captured by a forward pre-hook)."""
    captured: list[tuple[torch.Tensor, ...]] = []
    handle = module.register_forward_pre_hook(lambda _m, args: captured.append(tuple(a.detach() for a in args)))
    try:
        with torch.no_grad():
            model(x)
    finally:
        handle.remove()
    return captured[0]


@torch.no_grad()
def time_iterations(
    module: nn.Module, inputs: tuple[torch.Tensor, ...], *, max_iterations: int, device: str, warmup: int, repeats: int
) -> IterationTiming:
    """Time `module(*inputs)` at iterations = 1..max_iterations and fit the slope; restores `iterations`.

    The r values are timed in turn within each repeat, so that load on a shared machine hits them alike.
    """
    original = module.iterations
    samples: dict[int, list[float]] = {r: [] for r in range(1, max_iterations + 1)}
    try:
        for rep in range(warmup + repeats):
            for r in samples:
                module.iterations = r
                took = time_call(lambda: module(*inputs), device=device, warmup=0, repeats=1)[0]
                if rep >= warmup:
                    samples[r].append(took)
        seconds = {r: statistics.median(t) for r, t in samples.items()}
        events = None
        if device.startswith("cuda") and hasattr(module, "on_iteration"):
            events = _event_iteration_seconds(module, inputs, max_iterations, warmup, repeats)
    finally:
        module.iterations = original
    intercept, slope = fit_line(list(seconds), list(seconds.values()))
    return IterationTiming(seconds, slope, intercept, events)


def _event_iteration_seconds(
    module: nn.Module, inputs: tuple[torch.Tensor, ...], r: int, warmup: int, repeats: int
) -> float:
    """Median over repeats of the mean time between CUDA events recorded after consecutive iterations."""
    module.iterations = r
    per_repeat = []
    for rep in range(warmup + repeats):
        events = [torch.cuda.Event(enable_timing=True) for _ in range(r)]
        module.on_iteration = lambda it: events[it].record()
        try:
            module(*inputs)
        finally:
            module.on_iteration = None
        events[-1].synchronize()
        if rep >= warmup and r > 1:
            gaps = [a.elapsed_time(b) / 1e3 for a, b in zip(events[:-1], events[1:])]
            per_repeat.append(statistics.fmean(gaps))
    return statistics.median(per_repeat) if per_repeat else float("nan")
