"""Units as Ray tasks, on a Ray started here (ray.address unset) or on a running cluster (ray.address=auto|host:port).

A checkpoint that several units need (same model, seed, data and train settings: remote.groups) is trained by one
task; the units' tasks take its ObjectRef as an argument, so Ray runs them after it. Every task asks for
ray.cpus_per_unit CPUs and ray.gpus_per_unit GPUs. Ray retries a task up to ray.max_retries times, both when its
worker dies (a lost node costs only its tasks) and when it raises (retry_exceptions): a unit may hit a passing fault,
such as another job's memory on its GPU. A CapsbenchError is not retried (remote.py). A unit whose tries are all
spent is handed back failed; the other units go on.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

from omegaconf import DictConfig

from capsbench.run.launchers import remote
from capsbench.run.units import UnitResult, UnitSpec, failed

# Under `uv run`, Ray would rebuild the uv project for its workers from a copy of the working directory (which needs
# the package index, and hangs without it). Workers of a Ray started here use this interpreter, which already has
# capsbench; cluster nodes must have capsbench installed. Set RAY_ENABLE_UV_RUN_RUNTIME_ENV=1 to get Ray's behaviour.
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
import ray  # noqa: E402
from ray.exceptions import RayError  # noqa: E402

log = logging.getLogger(__name__)


class RayLauncher:
    """Runs units as Ray tasks and yields their results in the order they finish.

    Args:
        cfg: the run config; reads threads (torch threads per task; None leaves Ray's OMP_NUM_THREADS, the task's
            CPUs) and ray.* (launchers/settings.py).
    """

    def __init__(self, cfg: DictConfig) -> None:
        self.settings = cfg.ray

    def task_options(self) -> dict[str, Any]:
        s = self.settings
        return {"num_cpus": s.cpus_per_unit, "num_gpus": s.gpus_per_unit, "max_retries": s.max_retries,
                "retry_exceptions": True}

    def run(self, units: list[UnitSpec]) -> Iterator[UnitResult]:
        if not units:
            return
        connected = self._connect()
        try:
            yield from self._run(units)
        finally:
            if connected:
                ray.shutdown()  # stops a Ray started here; from a cluster it only disconnects

    def _connect(self) -> bool:
        """Start or join Ray; False when this process was already connected (e.g. a notebook): that session is
        used as it is and left running."""
        if ray.is_initialized():
            log.info("using the Ray session this process already holds")
            return False
        s = self.settings
        if s.address:
            ray.init(address=s.address)
        else:
            ray.init(num_cpus=s.num_cpus, num_gpus=s.num_gpus, include_dashboard=False)
        log.info("Ray resources: %s", ray.cluster_resources())
        return True

    def _run(self, units: list[UnitSpec]) -> Iterator[UnitResult]:
        options = self.task_options()
        train = ray.remote(remote.train_entry).options(**options, name="capsbench.train")
        measure = ray.remote(remote.measure_entry).options(**options, name="capsbench.unit")
        pending: dict[ray.ObjectRef, UnitSpec] = {}
        grouped = remote.groups(units)
        for group in grouped:
            if len(group) == 1:
                pending[measure.remote(group[0].to_dict())] = group[0]
                continue
            trained = train.remote(group[0].to_dict())
            for unit in group:
                pending[measure.remote(remote.after_training(unit).to_dict(), trained)] = unit
        log.info("%d unit(s) submitted to Ray in %d group(s) by checkpoint", len(units), len(grouped))
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                unit = pending.pop(ready[0])
                try:
                    answer = ray.get(ready[0])
                except RayError as exc:  # its own exception (or its training's) after the retries, or a lost worker
                    cause = getattr(exc, "cause", None)
                    log.error("unit %s failed after %d retries: %s", unit.name, self.settings.max_retries, cause or exc)
                    yield failed(unit, cause if isinstance(cause, BaseException) else exc)
                    continue
                yield remote.unpack(unit, answer)
        finally:
            for ref in pending:  # the driver stopped early (a fatal error, Ctrl-C): free the cluster
                ray.cancel(ref, force=True)
