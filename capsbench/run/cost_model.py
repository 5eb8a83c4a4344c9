"""One cost model for plans and progress: a unit's work in image passes (training: epochs x images x 3, none when its
checkpoint is cached or another unit trains it; measuring: its suite's declared passes) priced by a device's measured
rates (image passes per second, per model at a budget's sizes) from the shipped table suites/devices/rates.yaml, under
the rates this machine measured itself (<cache_dir>/rates.json, updated as units finish). The units' progress bar
weighs units by the same work."""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from capsbench.data import DATASETS
from capsbench.run.units import UnitEvent, UnitResult, UnitSpec
from capsbench.suites import SUITES
from capsbench.util.atomic import write_text
from capsbench.util.folders import checkpoint_file, partial_progress_file
from capsbench.util.shipped import shipped_dir

log = logging.getLogger(__name__)
TRAIN_PASSES = 3  # a training step: a forward pass and a backward pass of about twice its cost, per image
DEFAULT_GPU = "H100"  # what device=cuda is priced as where this machine has no GPU and --gpu names none
OBSERVED = "rates.json"  # under the checkpoint cache: the rates this machine measured
MINE = "observed"  # in a device's entry of rates(): which of its rates this machine measured ("kind/where/model")
SCALE_WORDS = {False: "peak fp32 throughput", True: "cores"}  # what a device's `scale` is, for a GPU and a CPU


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
    first of them: none when the checkpoint is in the cache already, the epochs left when training will resume."""
    trained: set[str] = set()
    out = {}
    for unit in units:
        train = 0.0
        if unit.checkpoint is not None and unit.checkpoint not in trained:
            trained.add(unit.checkpoint)
            if not checkpoint_cached(unit):
                epochs = max(1, int(unit.config["train"]["epochs"]))
                train = training_work(unit) * (epochs - min(epochs_done(unit), epochs)) / epochs
        out[unit.key] = Work(train, SUITES.get(unit.suite)().work(unit.run_config()))
    return out


def epochs_done(unit: UnitSpec) -> int:
    """The epochs of the unit's checkpoint that its resumable training state holds (0: none, or retrain=true)."""
    if unit.config.get("retrain") or unit.checkpoint is None:
        return 0
    try:
        done = json.loads(partial_progress_file(unit.config["cache_dir"], unit.checkpoint).read_text())["epochs_done"]
    except (OSError, ValueError, TypeError, KeyError):
        return 0
    return done if isinstance(done, int) and not isinstance(done, bool) and done > 0 else 0


def measuring_where(unit: UnitSpec) -> str:
    """The rates table's place of the unit's measuring speed: "<work kind>/<budget>", the work kind its suite's
    (robustness_l2+minimal for a robustness_l2 unit with minimum-norm attacks)."""
    return f"{SUITES.get(unit.suite)().work_kind(unit.run_config())}/{unit.config['budget']}"


def checkpoint_cached(unit: UnitSpec) -> bool:
    """Whether the checkpoint the unit trains is in the cache (retrain=true: never)."""
    return not unit.config.get("retrain") and unit.checkpoint is not None \
        and checkpoint_file(unit.config["cache_dir"], unit.checkpoint).is_file()


# --- the device's rates ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Estimate:
    """Minutes of a set of units on a device (None: no rate for some of them, named in `why`); `basis` says in a few
    words what the price rests on (e.g. "priced for 2 x86-64 CPU cores, idle")."""

    minutes: float | None
    why: str
    device: str
    basis: str = ""

    def words(self) -> str:
        """'about 12 min', 'about 3.5 h', 'under a minute' or 'unknown'."""
        if self.minutes is None:
            return "unknown"
        if self.minutes < 0.5:
            return "under a minute"
        return f"about {self.minutes:.0f} min" if self.minutes < 90 else f"about {self.minutes / 60:.1f} h"


def device_key(device: str, gpu: str | None = None) -> str:
    """The rates table's name for a run's device: cpu<cores> for the CPU (the cores this process may use); for CUDA
    the GPU in this machine (by the table's names, e.g. H200), else `gpu` (a GPU named for a plan priced elsewhere),
    else DEFAULT_GPU."""
    if not str(device).startswith("cuda"):
        return f"cpu{len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()}"
    import torch  # lazy: only a CUDA run needs it here, and it is loaded by then

    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        return next((g for g in gpu_names() if g in name), name)
    return gpu or DEFAULT_GPU


def gpu_names() -> list[str]:
    """The GPUs the shipped table describes (with their published peak), longest names first for matching."""
    return sorted((d for d, row in _shipped().items() if not d.startswith("cpu")), key=len, reverse=True)


def rates(cache_dir: str | None) -> dict[str, Any]:
    """The shipped table under what this machine measured (<cache_dir>/rates.json), device by device; each device's
    MINE lists the rates that are this machine's."""
    table = _shipped()
    for device, seen in _observed(cache_dir).items():
        mine = table.setdefault(device, {"label": device})
        for kind in ("train", "measure"):
            for where, models in seen.get(kind, {}).items():
                mine.setdefault(kind, {}).setdefault(where, {}).update(models)
                mine.setdefault(MINE, []).extend(f"{kind}/{where}/{m}" for m in models)
    return table


def _shipped() -> dict[str, Any]:
    return yaml.safe_load((shipped_dir() / "suites" / "devices" / "rates.yaml").read_text())


def price(units: list[UnitSpec], work: dict[str, Work], device: str, table: dict[str, Any]) -> Estimate:
    """The minutes of `units` (their `work`) on `device`, every rate that was not measured there derived from one that
    was (the basis said in `why`); None only where nothing can be derived."""
    seconds, notes, missing, label, sources = _priced(units, work, device, table)
    if missing:
        return Estimate(None, "; ".join(dict.fromkeys(missing)), label)
    return Estimate(sum(w.total for w in seconds.values()) / 60.0, "; ".join(dict.fromkeys(notes)), label,
                    _basis(sources, device if device in table else _fallback_device(device, table), table))


def priced_work(units: list[UnitSpec], work: dict[str, Work], device: str, table: dict[str, Any]) -> dict[str, Work]:
    """Each unit's work in seconds on `device` (a part with no rate at its declared passes over the device's slowest
    measuring rate): what the units' progress bar counts, so its first time left is the cost model's and later ones
    follow the rate measured."""
    return _priced(units, work, device, table)[0]


def _priced(units: list[UnitSpec], work: dict[str, Work], device: str,
            table: dict[str, Any]) -> tuple[dict[str, Work], list[str], list[str], str, set[tuple[str, bool]]]:
    notes = [] if device in table else [f"{device} is not in suites/devices/rates.yaml: priced as "
                                        f"{_fallback_device(device, table)}"]
    device = device if device in table else _fallback_device(device, table)
    missing, out, sources = [], {}, set()
    slowest = min((r for models in table[device].get("measure", {}).values() for r in models.values()), default=1000.0)
    for unit in units:
        w, budget, parts = work[unit.key], unit.config["budget"], {}
        for kind, passes, where in (("train", w.train, budget), ("measure", w.measure, measuring_where(unit))):
            if passes <= 0:
                parts[kind] = 0.0
                continue
            rate, note, source = _rate(table, device, kind, where, unit)
            if rate is None:
                missing.append(f"no {kind} rate for {unit.model} ({where}) on {device} nor one to derive it from")
                rate = slowest
            else:
                sources.add((source, f"{kind}/{where}/{unit.model}" in table[source].get(MINE, ())))
            parts[kind] = passes / rate
            notes += [note] if note else []
        out[unit.key] = Work(parts["train"], parts["measure"])
    return out, notes, missing, table[device].get("label", device), sources


def _basis(sources: set[tuple[str, bool]], device: str, table: dict[str, Any]) -> str:
    """What a price rests on, in a few words: the shipped rates of the run's device ("priced for 2 x86-64 CPU
    cores, idle": the table's rates were measured on idle machines), this machine's own ("by this machine's earlier
    runs", their load included), or another device's ("from the measured rates of NVIDIA H200", derived as `why`
    says)."""
    parts = []
    if (device, False) in sources:
        parts.append(f"for {_label(table, device)}, idle")
    if any(mine for _, mine in sources):
        parts.append("by this machine's earlier runs")
    others = sorted({_label(table, d) for d, mine in sources if d != device and not mine})
    if others:
        parts.append(f"from the measured rates of {' and '.join(others)}")
    return "priced " + ", and ".join(parts) if parts else ""


def _label(table: dict[str, Any], device: str) -> str:
    return str(table[device].get("label", device))


def _fallback_device(device: str, table: dict[str, Any]) -> str:
    """A device the table lacks is priced as the first of its kind the table has (a GPU, or CPU cores)."""
    cpu = device.startswith("cpu")
    return next((d for d in table if d.startswith("cpu") == cpu), next(iter(table)))


def _rate(table: dict[str, Any], device: str, kind: str, where: str, unit: UnitSpec,
          across: bool = True) -> tuple[float | None, str, str]:
    """The image passes per second of `unit`'s `kind` of work on `device`, how it was found, and the device whose
    measured rate it rests on: measured there; else
    the model's rate on another device of its kind, scaled by their scale (a GPU's published peak fp32, a CPU's
    cores); else, on this device or another, the rate of the model measured at `where` whose MACs per image are
    closest, scaled by MACs (and scale); else the model's rate in another suite at this budget; else (across) the rate
    derived on a device of the other kind (a CPU for a GPU), times the measured speed-up between them. None: nothing
    to derive it from."""
    here, model = table[device], unit.model
    peers = [device] + [d for d in table if d != device and d.startswith("cpu") == device.startswith("cpu")
                        and "scale" in table[d]]
    ratio = {d: float(here.get("scale", 1.0)) / float(table[d].get("scale", 1.0)) for d in peers}
    for d in peers:
        got = table[d].get(kind, {}).get(where, {})
        if model in got:
            basis = "" if d == device else (f"{model} ({kind}, {where}) scaled from {_label(table, d)}'s measured "
                                            f"rate by {SCALE_WORDS[d.startswith('cpu')]}")
            per_image = _training_scale(unit, where) if kind == "train" else 1.0
            return float(got[model]) * ratio[d] / per_image, basis, d
    mine = unit_macs(unit)
    work_kind = where.partition("/")[0] if kind == "measure" else None
    if mine:  # the measured model nearest in MACs per image (at `where` if any, else another budget of the suite)
        found = [(at, d, m, theirs) for d in peers for at, got in table[d].get(kind, {}).items()
                 if work_kind is None or at.partition("/")[0] == work_kind for m in got
                 if (theirs := reference_macs(m, at.rpartition("/")[2], unit))]
        same = [f for f in found if f[0] == where] or found
        if same:
            at, d, near, theirs = min(same, key=lambda f: (abs(math.log(f[3] / mine)), peers.index(f[1])))
            return (float(table[d][kind][at][near]) * theirs / mine * ratio[d],
                    f"{model} ({kind}, {where}) scaled by MACs from {near} ({at}) on {_label(table, d)}", d)
    if kind == "measure":
        budget = where.partition("/")[2]
        for other, got in here.get(kind, {}).items():
            if other.endswith(f"/{budget}") and model in got:
                return float(got[model]), f"{model} ({where}) priced at its {other} rate", device
    if not across:
        return None, "", device
    for d in (d for d in table if d.startswith("cpu") != device.startswith("cpu")):
        rate, _, source = _rate(table, d, kind, where, unit, across=False)
        speedup = _speedup(table, device, d)
        if rate is not None and speedup is not None:
            return rate * speedup, (f"{model} ({kind}, {where}) priced from {_label(table, d)} by the measured "
                                    f"speed-up of {_label(table, device)} over it ({speedup:.0f}x)"), source
    return None, "", device


def _speedup(table: dict[str, Any], device: str, other: str) -> float | None:
    """How many times faster `device` is than `other`: the median ratio of their rates for the same work (kind,
    suite and budget, model) measured on both; a device with none shared is taken through a measured device of its
    kind, scaled by their `scale`."""
    for d in [device] + [d for d in table if d != device and d.startswith("cpu") == device.startswith("cpu")]:
        ratios = [float(rate) / float(table[other][kind][where][model])
                  for kind in ("train", "measure") for where, models in table[d].get(kind, {}).items()
                  for model, rate in models.items()
                  if model in table[other].get(kind, {}).get(where, {})]
        if ratios:
            return statistics.median(ratios) * float(table[device].get("scale", 1)) / float(table[d].get("scale", 1))
    return None


@functools.cache
def _macs(model: str, args_json: str) -> float | None:
    """MACs of one forward pass of one image through `model` built with these arguments (on the meta device: no
    memory, no arithmetic), by torch's FlopCounterMode; None where it cannot be built or counted."""
    import torch  # lazy: pricing a plan loads torch, the CLI's start never
    from torch.utils.flop_counter import FlopCounterMode

    from capsbench.models import create_model

    args = json.loads(args_json)
    try:
        with torch.device("meta"), FlopCounterMode(display=False) as counter:
            net = create_model(model, **args).eval()
            net(torch.zeros(1, args["in_channels"], args["image_size"], args["image_size"]))
    except Exception:  # noqa: BLE001  (any model that cannot run on meta tensors is priced without MACs)
        return None
    return counter.get_total_flops() / 2 or None


def unit_macs(unit: UnitSpec) -> float | None:
    """MACs per image of the unit's model at its sizes, on the images its suite's protocol shows it (the affine
    suite's 40x40 canvases, else the dataset's own)."""
    cfg = unit.run_config()
    spec = DATASETS.get(unit.dataset)
    size = SUITES.get(unit.suite)().protocol(cfg).input_size(spec.train_crop or spec.image_size)
    return _model_macs(unit.model, dict(unit.config.get("model_args", {}).get(unit.model) or {}), unit.dataset, size)


def _training_scale(unit: UnitSpec, budget: str) -> float:
    """The unit's MACs per training image over those of the model a budget's training rate is kept for (its sizes at
    `budget`, on the dataset's own images): 1 for the ordinary units; an affine unit's narrower models on 40x40
    canvases differ, and every training rate is kept for that reference so that one suite's does not price another's
    (1 where either cannot be counted)."""
    mine, reference = unit_macs(unit), reference_macs(unit.model, budget, unit)
    return mine / reference if mine and reference else 1.0


def reference_macs(model: str, budget: str, unit: UnitSpec) -> float | None:
    """MACs per image of `model` at the sizes `budget` gives it (suites/budgets/<budget>.yaml), on the unit's
    dataset: the model a measured rate belongs to."""
    args = _shipped_yaml("budgets", budget).get("model_args", {}).get(model) or {}
    return _model_macs(model, dict(args), unit.dataset)


def _model_macs(model: str, args: dict[str, Any], dataset: str, size: int | None = None) -> float | None:
    from capsbench.models import MODELS  # lazy: the registry's defaults

    if model not in MODELS:
        return None
    spec = DATASETS.get(dataset)
    full = {**MODELS.get(model).arguments(), **args, "in_channels": spec.in_channels,
            "image_size": size or spec.train_crop or spec.image_size, "num_classes": spec.num_classes}
    return _macs(model, json.dumps(full, sort_keys=True, default=list))


@functools.cache
def _shipped_yaml(folder: str, name: str) -> dict[str, Any]:
    path = shipped_dir() / "suites" / folder / f"{name}.yaml"
    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}


# --- what a run measures ------------------------------------------------------------------------------------------
def observe(result: UnitResult, work: Work, device: str, cache_dir: str | None) -> None:
    """Add the rates a finished unit showed to <cache_dir>/rates.json (when the cache exists): its training (when it
    trained) and its measuring, per model at its budget, on `device`."""
    if cache_dir is None or not Path(cache_dir).is_dir() or result.status != "done" or result.seconds <= 0:
        return  # a run that cached nothing leaves no folder behind for its rates
    budget, seen = result.spec.config["budget"], {}
    measuring = result.seconds - result.train_seconds
    if result.train_seconds > 0 and work.train > 0:  # a target reached early trained fewer epochs than declared
        declared = int(result.spec.config["train"]["epochs"]) or 1
        done = min(declared, len(result.curves) or declared)  # every epoch, resumed ones too, as train_seconds
        rate = training_work(result.spec) * done / declared / result.train_seconds * _training_scale(result.spec,
                                                                                                      budget)
        seen["train"] = {budget: {result.spec.model: round(rate)}}
    if measuring > 0 and work.measure > 0:
        seen["measure"] = {measuring_where(result.spec): {result.spec.model: round(work.measure / measuring)}}
    if not seen:
        return
    table = _observed(cache_dir)
    mine = table.setdefault(device, {})
    for kind, wheres in seen.items():
        for where, models in wheres.items():
            mine.setdefault(kind, {}).setdefault(where, {}).update(models)
    write_text(Path(cache_dir) / OBSERVED, json.dumps(table, indent=1, sort_keys=True) + "\n")


def _observed(cache_dir: str | None) -> dict[str, Any]:
    """This machine's measured rates (<cache_dir>/rates.json): {device: {train|measure: {where: {model: rate}}}}.
    A damaged file, or a part of it that is not a positive rate, only loses those rates (with a warning naming the
    file): the shipped ones stand, and the next finished unit writes the file afresh."""
    path = None if cache_dir is None else Path(cache_dir) / OBSERVED
    if path is None or not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = None
    kept: dict[str, Any] = {}
    for device, seen in (data.items() if isinstance(data, dict) else ()):
        for kind, wheres in (seen.items() if isinstance(seen, dict) else ()):
            for where, models in (wheres.items() if kind in ("train", "measure") and isinstance(wheres, dict) else ()):
                for model, rate in (models.items() if isinstance(models, dict) else ()):
                    if _is_rate(rate):
                        kept.setdefault(device, {}).setdefault(kind, {}).setdefault(where, {})[model] = rate
    if kept != data:
        log.warning("%s: kept only its well-formed rates ({device: {train|measure: {where: {model: images per "
                    "second}}}}); the rest is measured again as units finish", path)
    return kept


def _is_rate(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


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
        self.resumed: dict[str, int] = {}  # epochs trained before this run, from the first epoch it reports
        self.trained: dict[str, float] = {}
        self.measured: dict[str, float] = {}

    def event(self, event: UnitEvent) -> float:
        """The work this event credits (0 for a unit not planned here, or work credited already)."""
        w = self.work.get(event.key)
        if w is None:
            return 0.0
        if event.kind == "epoch":  # w.train is the epochs left at planning: a resumed training's are credited alone
            epochs, epoch = max(1, self.epochs[event.key]), int(event.data["epoch"])
            before = self.resumed.setdefault(event.key, min(epoch - 1, epochs - 1))
            return self._credit(self.trained, event.key, w.train * (min(epoch, epochs) - before) / (epochs - before))
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
