"""How units are launched (the `launcher`, `ray.*` and `slurm.*` config keys): torch-free, validated with the config."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from capsbench.errors import CapsbenchError

LAUNCHERS = ("local", "ray", "slurm")
EXTRAS = {"ray": ("ray", "ray"), "slurm": ("submitit", "slurm")}  # launcher -> (module it needs, extra providing it)


def require_extra(launcher: str) -> None:
    """A launcher whose optional dependency is not installed is a one-line error naming the extra (no import)."""
    if launcher in EXTRAS:
        module, extra = EXTRAS[launcher]
        if importlib.util.find_spec(module) is None:
            raise CapsbenchError(f"launcher={launcher} needs the '{extra}' extra: pip install 'capsbench[{extra}]' "
                                 f"(or `uv sync --extra {extra}` in a checkout)")


@dataclass
class RaySettings:
    address: str | None = None  # unset: start a local Ray here; "auto" or host:port: connect to a running cluster
    num_cpus: int | None = None  # local Ray only; default: all CPUs of this machine
    num_gpus: int | None = None  # local Ray only; default: all GPUs
    cpus_per_unit: float | None = None  # CPUs one unit (a train or a measure task) asks for; default: its threads
    gpus_per_unit: float = 0.0
    max_retries: int = 2  # retries of a task whose worker died (a lost node costs only its units)


@dataclass
class SlurmSettings:
    partition: str | None = None
    gpus_per_unit: int = 1
    cpus_per_unit: int = 4
    time: int = 60  # minutes per unit (the job array's time limit)
    array_parallelism: int = 16  # units running at once
    max_retries: int = 1  # resubmissions of a unit whose job failed
    folder: str | None = None  # submitit's logs and pickles; default <output_dir>/slurm (on shared storage)
    cluster: str = "slurm"  # "slurm", or "local" to run the same job array as local processes (tests, laptops)
