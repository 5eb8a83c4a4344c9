"""Times capsbench's votes + dynamic routing against the broadcast-matmul reference (forward + backward,
Sabour sizes) in one run and prints the speed ratio, peak memory and the largest output/gradient difference.
Then the roofline: the step's GFLOP/s against a matmul probe's peak measured in the same run, and one routing
iteration's bytes moved (it reads the votes twice: s = sum_i c_ij u_j|i, then the agreements u_j|i . v_j) over the
measured device-to-device copy rate, the roof of this memory-bound loop.

    uv run python benchmarks/routing_speed.py [--batch 128] [--precision bf16] [--compile] [--device cuda]
"""

from __future__ import annotations

import argparse
import logging

import torch

from capsbench.cost import routing_bench as rb
from capsbench.cost.roofline import bandwidth_fraction, copy_bytes_per_second, peak_flops, step_throughput
from capsbench.cost.timing import device_label, time_iterations
from capsbench.util.precision import autocast, check_precision, dtype_label

log = logging.getLogger("routing_speed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--precision", default="fp32", help="fp32 or bf16 (fp16 is refused)")
    parser.add_argument("--compile", action="store_true", help="torch.compile capsbench's votes + routing")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    check_precision(args.precision)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    setup = rb.make_setup(args.batch, args.iterations, args.device)
    diffs = rb.max_differences(setup)
    ours, ref = rb.time_pair(
        rb.ours_step(setup, args.precision, args.compile), rb.reference_step(setup, args.precision),
        args.device, args.warmup, args.repeats,
    )
    mem = {w: rb.peak_memory_bytes(w, args.batch, args.precision, args.device) for w in ("ours", "reference")}
    log.info(
        "device: %s; precision: %s; compile: %s", device_label(args.device), dtype_label(args.precision), args.compile
    )
    log.info(
        "votes + %d routing iterations, forward + backward, batch %d, in 1152x8D -> out 10x16D",
        args.iterations,
        args.batch,
    )
    log.info(
        "max |ours - reference| (fp32): output %.2e, grad u %.2e, grad W %.2e",
        diffs["output"],
        diffs["grad_u"],
        diffs["grad_W"],
    )
    log.info(
        "capsbench: %8.1f ms (median of %d, timed alternately), peak memory %7.1f MiB",
        1e3 * ours,
        args.repeats,
        mem["ours"] / 2**20,
    )
    log.info(
        "reference: %8.1f ms (median of %d, timed alternately), peak memory %7.1f MiB",
        1e3 * ref,
        args.repeats,
        mem["reference"] / 2**20,
    )
    log.info("speed ratio reference / capsbench: %.2fx", ref / ours)
    peak = peak_flops(args.device, args.precision)
    step = step_throughput("votes + routing, forward + backward", rb.ours_step(setup, args.precision, args.compile),
                           device=args.device, peak=peak, repeats=args.repeats)
    log.info("roofline: %s", step.line())
    with torch.no_grad(), autocast(args.device, args.precision):
        u_hat = setup.votes(setup.u)  # (B, in, out, D), in the precision's dtype
        timing = time_iterations(setup.routing, (u_hat,), max_iterations=5, device=args.device, warmup=args.warmup,
                                 repeats=args.repeats)
    moved = 2 * u_hat.numel() * u_hat.element_size()
    log.info("roofline: one routing iteration moves %s", bandwidth_fraction(moved, timing.slope,
                                                                            copy_bytes_per_second(args.device)))


if __name__ == "__main__":
    main()
