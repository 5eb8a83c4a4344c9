"""Subprocess entry point: build one model, run one step, print {"peak_rss", "step_rss"} in bytes as JSON.

Usage: python -m capsbench.cost.probe '<StepSpec as JSON>' (see capsbench.cost.memory.cpu_peak_rss).
"""

from __future__ import annotations

import json
import os
import resource
import sys

import torch

from capsbench.cost.memory import StepSpec, run_step
from capsbench.models import create_model


def current_rss() -> int:
    """Resident set size now, in bytes (Linux /proc)."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss() -> int:
    """Peak resident set size of this process so far, in bytes (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main(argv: list[str]) -> None:
    raw = json.loads(argv[1])
    spec = StepSpec(**{**raw, "image_shape": tuple(raw["image_shape"])})
    torch.manual_seed(spec.seed)
    args = {k: tuple(v) if isinstance(v, list) else v for k, v in spec.model_args.items()}
    model = create_model(spec.model, **args)
    before = current_rss()
    run_step(model, spec, "cpu")
    peak = peak_rss()
    sys.stdout.write(json.dumps({"peak_rss": peak, "step_rss": max(0, peak - before)}) + "\n")


if __name__ == "__main__":
    main(sys.argv)
