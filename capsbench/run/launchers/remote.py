"""What the Ray and SLURM launchers share: the functions their workers run (plain, picklable by reference, JSON-able in
and out), how units are grouped so that a checkpoint several units need is trained once, and how the driver reads
what a worker sent back.

A CapsbenchError in a worker (bad input or environment: every retry and every unit would fail the same way) comes
back as a value, {"fatal": message}, so that no launcher retries it; the driver raises it. Any other exception is the
unit's own failure: launchers retry it, then report the unit failed.
"""

from __future__ import annotations

import platform
from dataclasses import replace
from typing import Any

from capsbench.errors import CapsbenchError
from capsbench.run.execute import execute, train_only, training_group
from capsbench.run.units import UnitResult, UnitSpec

FATAL = "fatal"


def train_entry(spec: dict[str, Any]) -> dict[str, Any]:
    """Worker side: train (or find) the checkpoint of a group of units; {"checkpoint": key} or {"fatal": message}."""
    try:
        return {"checkpoint": train_only(UnitSpec.from_dict(spec))}
    except CapsbenchError as exc:
        return _fatal(exc)


def measure_entry(spec: dict[str, Any], trained: dict[str, Any] | None = None) -> dict[str, Any]:
    """Worker side: run one unit (after its group's training, when `trained` is that task's answer); the UnitResult
    as a dict, or {"fatal": message}."""
    if trained is not None and FATAL in trained:
        return trained
    try:
        return execute(UnitSpec.from_dict(spec)).to_dict()
    except CapsbenchError as exc:
        return _fatal(exc)


def job_entry(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    """One SLURM job: "train" a group's checkpoint or "measure" a unit."""
    return train_entry(spec) if kind == "train" else measure_entry(spec)


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
