"""Routing speed benchmark: capsbench's votes + dynamic routing against the broadcast-matmul formulation
many public CapsNets use, forward and backward, same inputs, same run. Driven by benchmarks/routing_speed.py."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from dataclasses import dataclass

import torch

from capsbench.cost.probe import current_rss, peak_rss, reset_peak_rss
from capsbench.cost.timing import median_seconds
from capsbench.layers.capsules import CapsuleVotes, squash
from capsbench.layers.routing import DynamicRouting
from capsbench.util.precision import autocast, maybe_compile

SABOUR = {"in_caps": 1152, "in_dim": 8, "out_caps": 10, "out_dim": 16}  # PrimaryCaps 6x6x32 of 8D -> 10 x 16D


def reference_forward(u: torch.Tensor, weight: torch.Tensor, iterations: int) -> torch.Tensor:
    """The common public formulation: votes by a broadcast matmul of W (1, in, out, D_out, D_in) with
    u (B, in, 1, D_in, 1); s and agreements by elementwise products and sums.
    Shapes: u (B, in, D_in) -> v (B, out, D_out)."""
    u_hat = torch.matmul(weight, u[:, :, None, :, None]).squeeze(-1)  # (B, in, out, D_out)
    b = torch.zeros(u_hat.shape[:3], dtype=u_hat.dtype, device=u_hat.device)  # (B, in, out)
    for r in range(iterations):
        c = torch.softmax(b, dim=2)
        s = (c.unsqueeze(-1) * u_hat).sum(dim=1)  # (B, out, D_out)
        v = squash(s)
        if r < iterations - 1:
            b = b + (u_hat * v.unsqueeze(1)).sum(dim=-1)
    return v


def reference_weight(votes: CapsuleVotes) -> torch.Tensor:
    """capsbench's W (in, D_in, out * D_out) in the reference layout (1, in, out, D_out, D_in)."""
    in_caps, in_dim, _ = votes.weight.shape
    w = votes.weight.detach().view(in_caps, in_dim, votes.out_caps, votes.out_dim)  # (in, D_in, out, D_out)
    return w.permute(0, 2, 3, 1).unsqueeze(0).contiguous().requires_grad_()  # (1, in, out, D_out, D_in)


@dataclass
class Setup:
    u: torch.Tensor
    votes: CapsuleVotes
    routing: DynamicRouting
    weight: torch.Tensor
    iterations: int


def make_setup(batch: int, iterations: int = 3, device: str = "cpu", seed: int = 0, **sizes: int) -> Setup:
    """Seeded votes and a routing module at Sabour's sizes (or `sizes`) for timing routing."""
    torch.manual_seed(seed)
    dims = {**SABOUR, **sizes}
    votes = CapsuleVotes(**dims).to(device)
    u = torch.randn(batch, dims["in_caps"], dims["in_dim"], device=device).requires_grad_()
    return Setup(u, votes, DynamicRouting(iterations=iterations), reference_weight(votes), iterations)


def ours_step(setup: Setup, precision: str = "fp32", compile_model: bool = False):
    """One forward + backward of capsbench's votes and routing; returns a closure for timing."""
    module = maybe_compile(torch.nn.Sequential(setup.votes, setup.routing), compile_model)

    def step() -> torch.Tensor:
        with autocast(setup.u.device.type, precision):
            v = module(setup.u)
        v.float().square().sum().backward()
        return v

    return step


def reference_step(setup: Setup, precision: str = "fp32"):
    """One forward + backward of the broadcast-matmul reference routing on the setup's votes."""
    def step() -> torch.Tensor:
        with autocast(setup.u.device.type, precision):
            v = reference_forward(setup.u, setup.weight, setup.iterations)
        v.float().square().sum().backward()
        return v

    return step


def max_differences(setup: Setup) -> dict[str, float]:
    """Max |ours - reference| of the outputs and of the gradients w.r.t. u and W (fp32)."""
    diffs = {}
    for name, step in (("ours", ours_step(setup)), ("reference", reference_step(setup))):
        setup.u.grad, setup.votes.weight.grad, setup.weight.grad = None, None, None
        v = step().detach()
        diffs[name] = (
            v,
            setup.u.grad.clone(),
            (setup.votes.weight.grad if name == "ours" else setup.weight.grad).clone(),
        )
    (v1, gu1, gw1), (v2, gu2, gw2) = diffs["ours"], diffs["reference"]
    gw2 = gw2.squeeze(0).permute(0, 3, 1, 2).reshape_as(gw1)  # back to (in, D_in, out * D_out)
    return {
        "output": (v1 - v2).abs().max().item(),
        "grad_u": (gu1 - gu2).abs().max().item(),
        "grad_W": (gw1 - gw2).abs().max().item(),
    }


def time_pair(first, second, device: str, warmup: int, repeats: int) -> tuple[float, float]:
    """Median seconds of two steps timed alternately, so that a shared machine's load hits both alike."""
    times: tuple[list[float], list[float]] = ([], [])
    for rep in range(warmup + repeats):
        for step, out in ((first, times[0]), (second, times[1])):
            seconds = median_seconds(step, device=device, warmup=0, repeats=1)
            if rep >= warmup:
                out.append(seconds)
    return statistics.median(times[0]), statistics.median(times[1])


def peak_memory_bytes(which: str, batch: int, precision: str, device: str) -> int:
    """Peak memory of one step of `which`: CUDA max allocated, or on CPU the peak RSS of a fresh process
    minus its RSS just before the step."""
    if device.startswith("cuda"):
        setup = make_setup(batch, device=device)
        step = ours_step(setup, precision) if which == "ours" else reference_step(setup, precision)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        step()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base
    args = json.dumps({"which": which, "batch": batch, "precision": precision})
    done = subprocess.run(
        [sys.executable, "-m", "capsbench.cost.routing_bench", args], capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        raise RuntimeError(f"memory subprocess for {which} failed: {done.stderr.strip().splitlines()[-1:]}")
    return int(done.stdout.strip().splitlines()[-1])


def _memory_child(raw: str) -> None:
    spec = json.loads(raw)
    setup = make_setup(spec["batch"])
    step = ours_step(setup, spec["precision"]) if spec["which"] == "ours" else reference_step(setup, spec["precision"])
    before = current_rss()
    reset_peak_rss()
    step()
    sys.stdout.write(f"{peak_rss() - before}\n")


if __name__ == "__main__":
    _memory_child(sys.argv[1])
