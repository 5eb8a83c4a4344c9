"""Rough wall time of units on this repository's reference machine (2 x86-64 CPU cores), from runs measured on it, so
that a plan can say what each part costs before anything starts. An estimate, not a promise: a shared machine is
slower, a GPU far faster. Training scales with its epochs (a target-driven run may stop earlier: the cap is counted),
attacks with the test images times the nonzero eps values."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from capsbench.run.units import UnitSpec

# Minutes per training epoch on the full MNIST training split at quick sizes, 2 threads, idle (the default job's
# training, 2026-11-26: capsnet 45 s, cnn_sabour 73 s, cnn_9x9 40 s per epoch).
QUICK_EPOCH = {"capsnet": 0.75, "cnn_sabour": 1.22, "cnn_9x9": 0.65}
PAPER_EPOCH = {"capsnet": 18.0}  # the published CapsNet: about 18 minutes per MNIST epoch on 2 CPU cores
# Robustness attacks, minutes per 1,000 test images per nonzero eps at quick sizes (the default job: 1,000 images,
# 6 nonzero eps; FGSM, APGD and the ensemble of the quick budget with APGD-T towards every other class, measured idle
# on 2026-11-26: results/robustness-quick-cpu2.md).
QUICK_ATTACK = {"capsnet": 1.34, "cnn_sabour": 1.08, "cnn_9x9": 0.50}
DETECTION_FACTOR = 2.0  # params.detection_fpr adds the detection-aware attack and the detector's own pass
# Minutes per unit of the suites that cost about the same per model (efficiency at paper: the three parameter and
# speed claims' 12 units, published CapsNet, Efficient-CapsNet and cnn_sabour, took 5.2 min idle on 2026-11-26).
PER_UNIT = {("overlap", "quick"): 1.9, ("efficiency", "quick"): 0.6, ("efficiency", "paper"): 0.45,
            ("accuracy", "quick"): 0.1, ("accuracy", "paper"): 1.0}
HOUR = 60.0


@dataclass(frozen=True)
class Estimate:
    """Minutes of a set of units on 2 CPU cores (None: no measured reference; inf: many hours), and what dominates."""

    minutes: float | None
    why: str

    @property
    def over_an_hour(self) -> bool:
        return self.minutes is not None and self.minutes > HOUR

    def words(self) -> str:
        """'about 12 min', 'about 3.5 h', 'many hours' or 'unknown'."""
        if self.minutes is None:
            return "unknown"
        if self.minutes == float("inf"):
            return "many hours"
        return f"about {self.minutes:.0f} min" if self.minutes < 90 else f"about {self.minutes / 60:.1f} h"


def estimate(units: list[UnitSpec], training_group: Callable[[UnitSpec], str | None]) -> Estimate:
    """The minutes of `units` (each checkpoint trained once: `training_group` names the checkpoint a unit needs)."""
    total, notes, trained, missing = 0.0, [], set(), ""
    for unit in units:
        group = training_group(unit)
        if group is not None and group not in trained:
            trained.add(group)
            minutes, why = _training(unit)
            if minutes == float("inf"):
                return Estimate(minutes, why)
            if minutes is None:
                missing = missing or why
            else:
                total += minutes
                notes += [why] if why else []
        minutes, why = _measuring(unit)
        if minutes is None:
            missing = missing or why
        else:
            total += minutes
    return Estimate(None, missing) if missing else Estimate(total, "; ".join(dict.fromkeys(notes)))


def _training(unit: UnitSpec) -> tuple[float | None, str]:
    """Minutes to train the unit's checkpoint, and a note on what makes it long."""
    config, train = unit.config, unit.config["train"]
    on_cpu = not str(config["device"]).startswith("cuda")
    table = PAPER_EPOCH if config["budget"] == "paper" else QUICK_EPOCH if config["budget"] == "quick" else {}
    per_epoch = table.get(unit.model)
    if per_epoch is None:
        if config["budget"] == "paper" and on_cpu:
            return float("inf"), f"budget=paper trains the published {unit.model}: hours on a CPU (meant for a GPU)"
        return None, f"no measured training time for {unit.model} at budget={config['budget']}"
    subset = (config.get("data") or {}).get("train_subset")
    share = min(1.0, subset / 55_000) if subset else 1.0  # MNIST's training split less its validation images
    passes = 1 + int(train["adv_steps"]) if train.get("adversarial") else 1
    minutes = per_epoch * int(train["epochs"]) * share * passes
    note = f"{unit.model} trained adversarially: {passes} forward-backward passes per batch" if passes > 1 else ""
    if config["budget"] == "paper" and on_cpu:
        note = f"budget=paper trains the published {unit.model}: {minutes / 60:.0f} h on 2 CPU cores (meant for a GPU)"
    return minutes, note


def _measuring(unit: UnitSpec) -> tuple[float | None, str]:
    """Minutes of the unit's measurements once its checkpoint exists."""
    config = unit.config
    fixed = PER_UNIT.get((unit.suite, config["budget"]))
    if fixed is not None:
        return fixed, ""
    if unit.suite != "robustness" or unit.model not in QUICK_ATTACK or config["budget"] != "quick":
        return None, f"no measured reference for {unit.name} at budget={config['budget']}"
    params = config.get("params") or {}
    eps = [e for e in (params.get("eps") or {}).get(unit.dataset, []) if e > 0]
    images = (config.get("data") or {}).get("test_subset") or 10_000
    minutes = QUICK_ATTACK[unit.model] * images / 1000 * len(eps)
    return minutes * (DETECTION_FACTOR if params.get("detection_fpr") is not None else 1.0), ""
