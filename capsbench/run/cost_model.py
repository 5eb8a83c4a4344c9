"""One cost model for plans and progress: a unit's work in image passes (training: epochs x images x 3, none when its
checkpoint is cached or another unit trains it; measuring: its suite's declared passes) priced by a device's measured
rates (image passes per second, per model at a budget's sizes) from the shipped table suites/devices/rates.yaml, under
the rates this machine measured itself (<cache_dir>/rates.json, updated as units finish). The units' progress bar
weighs units by the same work."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from capsbench.data import DATASETS
from capsbench.run.units import UnitEvent, UnitResult, UnitSpec
from capsbench.suites import SUITES
from capsbench.util.atomic import write_text
from capsbench.util.folders import checkpoint_file
from capsbench.util.shipped import shipped_dir

TRAIN_PASSES = 3  # a training step: a forward pass and a backward pass of about twice its cost, per image
GPUS = ("H200", "H100")  # the GPUs the shipped table prices; a GPU it lacks is priced as the first it has
OBSERVED = "rates.json"  # under the checkpoint cache: the rates this machine measured


@dataclass(frozen=True)
class Work:
    """A unit's declared work in image passes: training its checkpoint and measuring."""

    train: float
    measure: float

    @property
    def total(self) -> float:
        return self.train + self.measure


def training_work(spec: UnitSpec) -> float:
    """Image passes of training the unit's checkpoint: epochs x training images x TRAIN_PASSES, x (1 + 2 x steps)
    with PGD adversarial training (each step a forward and a backward pass)."""
    cfg = spec.run_config()
    size = DATASETS.get(cfg.dataset).train_size - cfg.data.val_size
    images = min(size, cfg.data.train_subset or size)
    adversarial = 1 + 2 * cfg.train.adv_steps if cfg.train.adversarial == "pgd" else 1
    return float(cfg.train.epochs * images * TRAIN_PASSES * adversarial)


def plan_work(units: list[UnitSpec]) -> dict[str, Work]:
    """Declared work per unit key. Units that share a checkpoint (the planner's key) count its training once, on the
    first of them, and none when the checkpoint is in the cache already."""
    trained: set[str] = set()
    out = {}
    for unit in units:
        train = 0.0
        if unit.checkpoint is not None and unit.checkpoint not in trained:
            trained.add(unit.checkpoint)
            train = 0.0 if checkpoint_cached(unit) else training_work(unit)
        out[unit.key] = Work(train, SUITES.get(unit.suite)().work(unit.run_config()))
    return out


def checkpoint_cached(unit: UnitSpec) -> bool:
    """Whether the checkpoint the unit trains is in the cache (retrain=true: never)."""
    return not unit.config.get("retrain") and unit.checkpoint is not None \
        and checkpoint_file(unit.config["cache_dir"], unit.checkpoint).is_file()


# --- the device's rates ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Estimate:
    """Minutes of a set of units on a device (None: no rate for some of them, named in `why`)."""

    minutes: float | None
    why: str
    device: str

    def words(self) -> str:
        """'about 12 min', 'about 3.5 h' or 'unknown'."""
        if self.minutes is None:
            return "unknown"
        return f"about {self.minutes:.0f} min" if self.minutes < 90 else f"about {self.minutes / 60:.1f} h"


def device_key(device: str, gpu: str | None = None) -> str:
    """The rates table's name for a run's device: cpu<cores> for the CPU (the cores this process may use); for CUDA
    the GPU in this machine (by name, e.g. H200), else `gpu` (a GPU named for a plan priced elsewhere), else H100."""
    if not str(device).startswith("cuda"):
        return f"cpu{len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()}"
    import torch  # lazy: only a CUDA run needs it here, and it is loaded by then

    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        return next((g for g in GPUS if g in name), name)
    return gpu or "H100"


def rates(cache_dir: str | None) -> dict[str, Any]:
    """The shipped table under what this machine measured (<cache_dir>/rates.json), device by device."""
    table = yaml.safe_load((shipped_dir() / "suites" / "devices" / "rates.yaml").read_text())
    for device, seen in _observed(cache_dir).items():
        mine = table.setdefault(device, {"label": device})
        for kind in ("train", "measure"):
            for where, models in seen.get(kind, {}).items():
                mine.setdefault(kind, {}).setdefault(where, {}).update(models)
    return table


def price(units: list[UnitSpec], work: dict[str, Work], device: str, table: dict[str, Any]) -> Estimate:
    """The minutes of `units` (their `work`) on `device` (a key of `table`); a device the table lacks is priced as
    its nearest kind (another GPU, or 2 CPU cores), said in `why`."""
    seconds, notes, missing, label = _priced(units, work, device, table)
    if missing:
        return Estimate(None, "; ".join(dict.fromkeys(missing)), label)
    return Estimate(sum(w.total for w in seconds.values()) / 60.0, "; ".join(dict.fromkeys(notes)), label)


def priced_work(units: list[UnitSpec], work: dict[str, Work], device: str, table: dict[str, Any]) -> dict[str, Work]:
    """Each unit's work in seconds on `device` (training and measuring priced by their rates; a part with no rate
    at its declared passes over the device's slowest measuring rate): what the units' progress bar counts, so its
    first time left is the cost model's and later ones follow the rate measured."""
    return _priced(units, work, device, table)[0]


def _priced(units: list[UnitSpec], work: dict[str, Work], device: str,
            table: dict[str, Any]) -> tuple[dict[str, Work], list[str], list[str], str]:
    known = device if device in table else _nearest(device, table)
    notes = [] if known == device else [f"{device} priced with {known}'s rates"]
    rates_of, missing, out = table[known], [], {}
    fallback = min((r for models in rates_of.get("measure", {}).values() for r in models.values()), default=1000.0)
    for unit in units:
        w, budget, parts = work[unit.key], unit.config["budget"], {}
        for kind, passes, where in (("train", w.train, budget), ("measure", w.measure, f"{unit.suite}/{budget}")):
            rate, note = _rate(rates_of.get(kind, {}).get(where, {}), unit.model) if passes > 0 else (1.0, "")
            if rate is None:
                missing.append(f"no {kind} rate for {unit.model} ({where}) on {known}")
                rate = fallback
            parts[kind] = passes / rate
            notes += [note] if note else []
        out[unit.key] = Work(parts["train"], parts["measure"])
    return out, notes, missing, rates_of.get("label", known)


def _nearest(device: str, table: dict[str, Any]) -> str:
    kind = "cpu" if device.startswith("cpu") else "gpu"
    same = [d for d in table if d.startswith("cpu")] if kind == "cpu" else [g for g in GPUS if g in table]
    return same[0] if same else next(iter(table))


def _rate(models: dict[str, float], model: str) -> tuple[float | None, str]:
    """The model's rate, else the slowest measured model's (said), else None."""
    if model in models:
        return float(models[model]), ""
    if not models:
        return None, ""
    slowest = min(models, key=models.get)
    return float(models[slowest]), f"{model} priced as {slowest}"


# --- what a run measures ------------------------------------------------------------------------------------------
def observe(result: UnitResult, work: Work, device: str, cache_dir: str | None) -> None:
    """Add the rates a finished unit showed to <cache_dir>/rates.json (when the cache exists): its training (when it
    trained) and its measuring, per model at its budget, on `device`."""
    if cache_dir is None or not Path(cache_dir).is_dir() or result.status != "done" or result.seconds <= 0:
        return  # a run that cached nothing leaves no folder behind for its rates
    budget, seen = result.spec.config["budget"], {}
    measuring = result.seconds - result.train_seconds
    if result.train_seconds > 0 and work.train > 0:
        seen["train"] = {budget: {result.spec.model: round(work.train / result.train_seconds)}}
    if measuring > 0 and work.measure > 0:
        seen["measure"] = {f"{result.spec.suite}/{budget}": {result.spec.model: round(work.measure / measuring)}}
    if not seen:
        return
    table = _observed(cache_dir)
    mine = table.setdefault(device, {})
    for kind, wheres in seen.items():
        for where, models in wheres.items():
            mine.setdefault(kind, {}).setdefault(where, {}).update(models)
    write_text(Path(cache_dir) / OBSERVED, json.dumps(table, indent=1, sort_keys=True) + "\n")


def _observed(cache_dir: str | None) -> dict[str, Any]:
    path = None if cache_dir is None else Path(cache_dir) / OBSERVED
    if path is None or not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # a damaged table of this machine's own rates only loses them: the shipped ones stand
    return data if isinstance(data, dict) else {}


# --- progress ------------------------------------------------------------------------------------------------------
class Credits:
    """The work of each unit credited as it happens: its training's share per epoch, its measuring as the unit reports
    it ("measured" events: passes so far, scaled to the units of `work`, e.g. priced seconds, by `declared`: the
    unit's work in passes), and whatever is left when it ends; never more than its work."""

    def __init__(self, work: dict[str, Work], units: list[UnitSpec], declared: dict[str, Work] | None = None) -> None:
        self.work = work
        self.scale = {k: (w.measure / declared[k].measure if declared and declared[k].measure > 0 else 1.0)
                      for k, w in work.items()}
        self.epochs = {u.key: int(u.config["train"]["epochs"]) for u in units}
        self.trained: dict[str, float] = {}
        self.measured: dict[str, float] = {}

    def event(self, event: UnitEvent) -> float:
        """The work this event credits (0 for a unit not planned here, or work credited already)."""
        w = self.work.get(event.key)
        if w is None:
            return 0.0
        if event.kind == "epoch":
            epochs = max(1, self.epochs[event.key])
            return self._credit(self.trained, event.key, w.train * min(int(event.data["epoch"]), epochs) / epochs)
        if event.kind == "measured":
            passes = float(event.data["passes"]) * self.scale[event.key]
            return self._credit(self.measured, event.key, min(w.measure, passes))
        return 0.0

    def finished(self, result: UnitResult) -> float:
        """The rest of the unit's declared work, credited when it ends."""
        w = self.work[result.key]
        return w.total - self.trained.pop(result.key, 0.0) - self.measured.pop(result.key, 0.0)

    @staticmethod
    def _credit(done: dict[str, float], key: str, now: float) -> float:
        before = done.get(key, 0.0)
        done[key] = max(before, now)
        return done[key] - before
