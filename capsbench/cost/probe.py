"""Subprocess entry point: build one model, run one step, print {"peak_rss", "step_rss"} in bytes as JSON.

Usage: python -m capsbench.cost.probe '<StepSpec as JSON>' (see capsbench.cost.memory.cpu_peak_rss).
"""

from __future__ import annotations

import json
import os
import sys

import torch

from capsbench.cost.memory import StepSpec, run_step
from capsbench.models import create_model


def current_rss() -> int:
    """Resident set size now, in bytes (Linux /proc)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss() -> int:
    """Peak resident set size (VmHWM) of this process since start or the last reset_peak_rss(), in bytes.

    Not getrusage's ru_maxrss: Linux carries the parent's RSS at fork into the child's ru_maxrss.
    """
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # reported in kB
    raise RuntimeError("no VmHWM in /proc/self/status: peak RSS needs Linux")


def reset_peak_rss() -> None:
    """Reset VmHWM to the current RSS (Linux >= 4.0: write 5 to /proc/self/clear_refs)."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")


def main(argv: list[str]) -> None:
    """Run one memory probe described by the command line and print its JSON result."""
    raw = json.loads(argv[1])
    spec = StepSpec(**{**raw, "image_shape": tuple(raw["image_shape"])})
    torch.manual_seed(spec.seed)
    args = {k: tuple(v) if isinstance(v, list) else v for k, v in spec.model_args.items()}
    model = create_model(spec.model, **args)
    before = current_rss()
    reset_peak_rss()
    run_step(model, spec, "cpu")
    peak = peak_rss()
    sys.stdout.write(json.dumps({"peak_rss": peak, "step_rss": peak - before}) + "\n")


if __name__ == "__main__":
    main(sys.argv)
