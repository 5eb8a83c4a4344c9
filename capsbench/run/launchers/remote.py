"""What the Ray and SLURM launchers share: the functions their workers run (plain, picklable by reference, JSON-able in
and out), how units are grouped so that a checkpoint several units need is trained once, how the driver reads what a
worker sent back, and the events file through which SLURM jobs stream a unit's events (Ray uses a queue actor).

A CapsbenchError in a worker (bad input or environment: every retry and every unit would fail the same way) comes
back as a value, {"fatal": message}, so that no launcher retries it; the driver raises it. Any other exception is the
unit's own failure: launchers retry it, then report the unit failed.
"""

from __future__ import annotations

import json
import logging
import platform
from dataclasses import replace
from pathlib import Path
from typing import Any

from capsbench.errors import CapsbenchError
from capsbench.run.execute import Sink, execute, train_only, training_group
from capsbench.run.units import UnitEvent, UnitResult, UnitSpec
from capsbench.util.signals import exit_status, signals_raise

FATAL = "fatal"
log = logging.getLogger(__name__)


def _drop(event: UnitEvent) -> None:
    """The sink of a worker whose driver reads no events."""


def train_entry(spec: dict[str, Any], sink: Sink | None = None) -> dict[str, Any]:
    """Worker side: train (or find) the checkpoint of a group of units; {"checkpoint": key} or {"fatal": message}."""
    try:
        return {"checkpoint": train_only(UnitSpec.from_dict(spec), sink or _drop)}
    except CapsbenchError as exc:
        return _fatal(exc)


def measure_entry(spec: dict[str, Any], trained: dict[str, Any] | None = None, sink: Sink | None = None
                  ) -> dict[str, Any]:
    """Worker side: run one unit (after its group's training, when `trained` is that task's answer); the UnitResult
    as a dict, or {"fatal": message}."""
    if trained is not None and FATAL in trained:
        return trained
    try:
        return execute(UnitSpec.from_dict(spec), sink or _drop).to_dict()
    except CapsbenchError as exc:
        return _fatal(exc)


def job_entry(kind: str, spec: dict[str, Any], events: str | None = None) -> dict[str, Any]:
    """One SLURM job: "train" a group's checkpoint or "measure" a unit, its events appended to the file `events`. A
    SIGTERM (the driver cancelling it, scancel) or SIGINT ends it as it ends a run: its training keeps its last epoch,
    and the job exits with 128 + the signal's number, without a traceback."""
    sink = EventFile(Path(events)) if events else None
    try:
        with signals_raise():
            return train_entry(spec, sink) if kind == "train" else measure_entry(spec, None, sink)
    except KeyboardInterrupt as exc:
        raise SystemExit(exit_status(exc)) from None


class EventFile:
    """A unit's events as JSON lines in a file on storage the driver shares (a SLURM job's folder): the worker
    appends, the driver reads what is new at each poll. Losing an event never fails the unit."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0

    def __call__(self, event: UnitEvent) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as fh:
                fh.write(json.dumps(event.to_dict()) + "\n")
        except OSError as exc:
            log.warning("cannot append unit event to %s (%s); the unit goes on", self.path, exc)

    def read_new(self) -> list[UnitEvent]:
        """Driver side: the complete lines appended since the last call."""
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        complete = data[: data.rfind(b"\n") + 1]
        self.offset += len(complete)
        return [UnitEvent.from_dict(json.loads(line)) for line in complete.splitlines() if line.strip()]


def _fatal(exc: CapsbenchError) -> dict[str, Any]:
    return {FATAL: f"{exc} (on host {platform.node()})"}


def groups(units: list[UnitSpec]) -> list[list[UnitSpec]]:
    """The units by the checkpoint they need (training_group), in plan order; a unit that trains nothing is alone."""
    grouped: dict[str, list[UnitSpec]] = {}
    alone: list[list[UnitSpec]] = []
    for unit in units:
        key = training_group(unit)
        if key is None:
            alone.append([unit])
        else:
            grouped.setdefault(key, []).append(unit)
    return [*grouped.values(), *alone]


def after_training(spec: UnitSpec) -> UnitSpec:
    """The unit as measured after its group's training task: that task honoured retrain=true, so the unit loads the
    checkpoint it just wrote instead of training it again (retrain is not part of the unit's key)."""
    return replace(spec, config={**spec.config, "retrain": False})


def unpack(spec: UnitSpec, answer: dict[str, Any]) -> UnitResult:
    """The driver's reading of a worker's answer for `spec`. Raises a CapsbenchError for a fatal answer, and for a
    worker that runs other capsbench code than the driver (its unit key differs): results must not be mixed."""
    if FATAL in answer:
        raise CapsbenchError(f"unit {spec.name}: {answer[FATAL]}")
    result = UnitResult.from_dict(answer)
    if result.key != spec.key:
        raise CapsbenchError(
            f"unit {spec.name} came back from host {result.host} with key {result.key}, expected {spec.key}: the "
            "workers run another capsbench version or code than this driver; install the same capsbench on every node")
    result.spec = spec
    return result
