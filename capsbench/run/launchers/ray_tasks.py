"""Units as Ray tasks, on a Ray started here (ray.address unset) or on a running cluster (ray.address=auto|host:port).

A checkpoint that several units need (same model, seed, data and train settings: remote.groups) is trained by one
task; the units' tasks take its ObjectRef as an argument, so Ray runs them after it. Every task asks for
ray.cpus_per_unit CPUs and ray.gpus_per_unit GPUs. Ray retries a task up to ray.max_retries times, both when its
worker dies (a lost node costs only its tasks) and when it raises (retry_exceptions): a unit may hit a passing fault,
such as another job's memory on its GPU. A CapsbenchError is not retried (remote.py). A unit whose tries are all
spent is handed back failed; the other units go on.

Events (a unit started, each training epoch, its measuring) travel through a Ray queue actor: workers send them as they
happen, without waiting (QueueSink), and the driver drains the queue between waits (at least every POLL_SECONDS) and
before it hands a result on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
from collections.abc import Iterator
from typing import Any

import ray
from omegaconf import DictConfig
from ray._private import ray_constants
from ray.exceptions import RayError
from ray.util.queue import Queue

from capsbench.run.execute import Sink
from capsbench.run.launchers import remote
from capsbench.run.units import UnitEvent, UnitResult, UnitSpec, failed
from capsbench.util.signals import handlers_kept

log = logging.getLogger(__name__)
POLL_SECONDS = 1.0  # longest wait between looks at the event queue
AUTH_SETTINGS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")  # Ray's token authentication, from the environment


class QueueSink:
    """Worker side: a unit's events sent to the driver's queue actor without waiting for them. A task that waits
    (ray.get) lends its CPU to the next task, and Ray then runs more tasks than it has CPUs: with a waiting put, each
    event could let one more unit start (four of five units at once on `ray.num_cpus=2` four minutes into a run).
    delivered() waits for them once, at the task's end, so they reach the queue before the driver sees its result.
    Losing an event never fails the unit."""

    def __init__(self, queue: Queue) -> None:
        self.actor = queue.actor
        self.sent: list[ray.ObjectRef] = []

    def __call__(self, event: UnitEvent) -> None:
        try:
            self.sent.append(self.actor.put_nowait.remote(event.to_dict()))
        except RayError as exc:
            log.warning("cannot send unit event to the driver (%s); the unit goes on", exc)

    def delivered(self) -> None:
        """Wait until every event sent so far is on the queue."""
        sent, self.sent = self.sent, []
        try:
            ray.get(sent)
        except RayError as exc:
            log.warning("unit events may be lost on the way to the driver (%s); the unit goes on", exc)


def train_task(spec: dict[str, Any], sink: QueueSink) -> dict[str, Any]:
    """A Ray task: remote.train_entry, its events on the queue before it returns."""
    try:
        return remote.train_entry(spec, sink)
    finally:
        sink.delivered()


def measure_task(spec: dict[str, Any], trained: dict[str, Any] | None, sink: QueueSink) -> dict[str, Any]:
    """A Ray task: remote.measure_entry, its events on the queue before it returns."""
    try:
        return remote.measure_entry(spec, trained, sink)
    finally:
        sink.delivered()


class RayLauncher:
    """Runs units as Ray tasks and yields their results in the order they finish.

    Args:
        cfg: the run config; reads threads (each unit runs with the spec's thread count, as on every launcher) and
            ray.* (config/launch.py; cpus_per_unit defaults to that thread count, so Ray never runs more threads
            than CPUs).
    """

    def __init__(self, cfg: DictConfig) -> None:
        self.settings = cfg.ray
        self.threads = cfg.threads

    def task_options(self) -> dict[str, Any]:
        s = self.settings
        cpus = s.cpus_per_unit if s.cpus_per_unit is not None else (self.threads or 1)
        return {"num_cpus": cpus, "num_gpus": s.gpus_per_unit, "max_retries": s.max_retries,
                "retry_exceptions": True}

    def run(self, units: list[UnitSpec], on_event: Sink) -> Iterator[UnitResult]:
        if not units:
            return
        saved = None if self.settings.address or ray.is_initialized() else own_token()
        connected = False
        try:
            connected = self._connect()
            yield from self._run(units, on_event)
        finally:
            if connected:
                ray.shutdown()  # stops a Ray started here; from a cluster it only disconnects
            if saved is not None:
                restore_token(saved)

    def _connect(self) -> bool:
        """Start or join Ray; False when this process was already connected (e.g. a notebook): that session is
        used as it is and left running."""
        if ray.is_initialized():
            log.info("using the Ray session this process already holds")
            return False
        s = self.settings
        with handlers_kept(), uv_hook_off():  # SIGINT and SIGTERM end the run with one line, as on every launcher
            if s.address:
                ray.init(address=s.address)
            else:
                ray.init(num_cpus=s.num_cpus, num_gpus=s.num_gpus, include_dashboard=False)
        log.info("Ray resources: %s", ray.cluster_resources())
        return True

    def _run(self, units: list[UnitSpec], on_event: Sink) -> Iterator[UnitResult]:
        options = self.task_options()
        train = ray.remote(train_task).options(**options, name="capsbench.train")
        measure = ray.remote(measure_task).options(**options, name="capsbench.unit")
        queue = Queue(actor_options={"num_cpus": 0})
        sink = QueueSink(queue)
        pending: dict[ray.ObjectRef, UnitSpec] = {}
        grouped = remote.groups(units)
        for group in grouped:
            if len(group) == 1:
                pending[measure.remote(group[0].to_dict(), None, sink)] = group[0]
                continue
            trained = train.remote(group[0].to_dict(), sink)
            for unit in group:
                pending[measure.remote(remote.after_training(unit).to_dict(), trained, sink)] = unit
        log.info("%d unit(s) submitted to Ray in %d group(s) by checkpoint", len(units), len(grouped))
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_SECONDS)
                _drain(queue, on_event)
                if not ready:
                    continue
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
            queue.shutdown()


def own_token() -> dict[str, str | None]:
    """Make the Ray this process starts require a token made for it alone: kept in the environment of this process
    and of the Ray processes it starts, never written to a file. Ray (2.60) binds its servers to every interface and
    turns a loopback node address into the host's, so the token is what keeps other hosts out. Returns the settings
    it replaced, for restore_token."""
    saved = {k: os.environ.get(k) for k in AUTH_SETTINGS}
    os.environ.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)})
    _reload_auth()
    return saved


def restore_token(saved: dict[str, str | None]) -> None:
    """Put back the Ray authentication settings own_token replaced."""
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    _reload_auth()


def _reload_auth() -> None:
    """Make Ray read its authentication settings from the environment again: its config, and the token its loader
    keeps from its first read (kept, the second Ray of one process got a new token and its driver the first one's,
    and could not reach its own GCS)."""
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")  # before the cache is dropped, as Ray's own reset does
    AuthenticationTokenLoader.instance().reset_cache()


def _drain(queue: Queue, on_event: Sink) -> None:
    """Hand every event waiting on the queue to the driver, oldest first."""
    waiting = queue.qsize()
    if waiting:
        for item in queue.get_nowait_batch(waiting):
            on_event(UnitEvent.from_dict(item))


@contextlib.contextmanager
def uv_hook_off() -> Iterator[None]:
    """Keep Ray's `uv run` hook out of ray.init: under `uv run` it would ship a copy of the working directory to the
    workers and rebuild the uv project there (gigabytes per session, from the package index). Workers of a Ray started
    here run this interpreter, which has capsbench; cluster nodes must have capsbench installed. The hook is read from
    Ray's constants at init (set when Ray was first imported, perhaps by someone else), so it is switched off around
    the call; RAY_ENABLE_UV_RUN_RUNTIME_ENV=1 in the environment keeps Ray's behaviour."""
    if os.environ.get("RAY_ENABLE_UV_RUN_RUNTIME_ENV") == "1":
        yield
        return
    saved = ray_constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV
    ray_constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV = False
    try:
        yield
    finally:
        ray_constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV = saved
