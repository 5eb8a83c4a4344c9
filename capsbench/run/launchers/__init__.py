"""Launchers execute units and hand their results back as they finish, and their events (started, each training
epoch) as they happen, nothing else: here in turn (local), as Ray tasks (local Ray or a cluster), or as a SLURM job
array through submitit."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol

from omegaconf import DictConfig

from capsbench.config.launch import require_extra
from capsbench.run.units import UnitEvent, UnitResult, UnitSpec


class Launcher(Protocol):
    def run(self, units: list[UnitSpec], on_event: Callable[[UnitEvent], None]) -> Iterator[UnitResult]:
        """Execute every unit; yield each result (failed ones with status "failed") as soon as it is there, and call
        `on_event` in this thread with each event a unit sends, in order, before its result."""


def make_launcher(cfg: DictConfig) -> Launcher:
    """The launcher the (validated) config names; a missing optional dependency is a one-line error naming the extra."""
    require_extra(cfg.launcher)
    if cfg.launcher == "ray":
        from capsbench.run.launchers.ray_tasks import RayLauncher

        return RayLauncher(cfg)
    if cfg.launcher == "slurm":
        from capsbench.run.launchers.slurm_jobs import SlurmLauncher

        return SlurmLauncher(cfg)
    from capsbench.run.launchers.local import LocalLauncher

    return LocalLauncher()
