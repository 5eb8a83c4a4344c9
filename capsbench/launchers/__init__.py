"""Launchers execute units and hand their results back as they finish, nothing else: here in turn (local), as Ray
tasks (local Ray or a cluster), or as a SLURM job array through submitit."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from omegaconf import DictConfig

from capsbench.errors import CapsbenchError
from capsbench.launchers.settings import LAUNCHERS
from capsbench.units import UnitResult, UnitSpec

EXTRAS = {"ray": ("ray", "ray"), "slurm": ("submitit", "slurm")}  # launcher -> (module it needs, extra providing it)


class Launcher(Protocol):
    def run(self, units: list[UnitSpec]) -> Iterator[UnitResult]:
        """Execute every unit; yield each result (failed ones with status "failed") as soon as it is there."""


def require_extra(launcher: str) -> None:
    """A launcher whose optional dependency is not installed is a one-line error naming the extra (no import)."""
    import importlib.util

    if launcher in EXTRAS:
        module, extra = EXTRAS[launcher]
        if importlib.util.find_spec(module) is None:
            raise CapsbenchError(f"launcher={launcher} needs the '{extra}' extra: pip install 'capsbench[{extra}]' "
                                 f"(or `uv sync --extra {extra}` in a checkout)")


def make_launcher(cfg: DictConfig) -> Launcher:
    """The launcher the config names; a missing optional dependency is a one-line error naming the extra."""
    if cfg.launcher not in LAUNCHERS:
        raise CapsbenchError(f"unknown launcher {cfg.launcher!r}: valid: {', '.join(LAUNCHERS)}")
    require_extra(cfg.launcher)
    if cfg.launcher == "ray":
        from capsbench.launchers.ray_tasks import RayLauncher

        return RayLauncher(cfg)
    if cfg.launcher == "slurm":
        from capsbench.launchers.slurm_jobs import SlurmLauncher

        return SlurmLauncher(cfg)
    from capsbench.launchers.local import LocalLauncher

    return LocalLauncher()
