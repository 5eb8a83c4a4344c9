"""How many CPU intra-op threads a unit uses: never more than the CPUs this process may run on. The thread count
can change the summation order of convolutions, so it is recorded with each checkpoint."""

from __future__ import annotations

import math
import os
from pathlib import Path

import torch

CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2 CPU quota: "<quota> <period>" or "max <period>"


def cpu_quota(path: Path = CGROUP_CPU_MAX) -> int | None:
    """CPUs a cgroup v2 quota allows (rounded up), or None without a quota (or outside Linux cgroups v2)."""
    if not path.is_file():
        return None
    quota, _, period = path.read_text().strip().partition(" ")
    if quota == "max" or not period:
        return None
    return max(1, math.ceil(int(quota) / int(period)))


def auto_threads() -> int:
    """The intra-op threads a unit uses unless `threads=N` says otherwise: torch's default (the physical cores,
    or OMP_NUM_THREADS), capped by the CPUs this process may run on (affinity mask, cgroup quota).

    More threads than CPUs is what hurts: measured on a 2-core machine shared with other jobs, 2 spinning
    OpenMP threads made a CapsNet step 3-7x slower than 1 thread (see capsbench/__init__.py for the wait policy).
    """
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = cpu_quota()
    return max(1, min(torch.get_num_threads(), allowed, quota or allowed))
