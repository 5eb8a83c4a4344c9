"""Rough wall time of units on a 2-core CPU, from the quick budget's measured runs, so that a plan can say which of
its parts would take over an hour before anything starts. An estimate, not a promise: a shared machine is slower."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from capsbench.run.units import UnitSpec

# Minutes on a 2-core x86-64 CPU at budget=quick, one seed, measured by the runs of results/README.md
# (robustness-quick-cpu2.md: training on the MNIST protocol, and its attacks per model, CapsNet's an idle-machine
# estimate from a loaded run; detection-quick-cpu2.md:
# capsnet's attacks with params.detection_fpr=0.05; overlap-quick-cpu2.md: 7.4 min for four models, training
# included; efficiency-quick-cpu2.md: 1.8 min for three models).
QUICK_TRAINING = {"capsnet": 2.6, "cnn_sabour": 5.1, "cnn_9x9": 2.1}
QUICK_MEASURING = {
    ("robustness", "capsnet"): 17.7,  # 12.3 before pgd_adaptive's raw-evidence and targeted passes; scaled, see there
    ("robustness", "cnn_sabour"): 6.3,
    ("robustness", "cnn_9x9"): 2.5,
    ("accuracy", "capsnet"): 0.1,
    ("accuracy", "cnn_sabour"): 0.1,
    ("accuracy", "cnn_9x9"): 0.1,
}
QUICK_DETECTION = {"capsnet": 18.1}
QUICK_PER_UNIT = {"overlap": 1.9, "efficiency": 0.6}  # training included where the suite trains
HOUR = 60.0


@dataclass(frozen=True)
class Estimate:
    """Minutes of a set of units on 2 CPU cores (None: no measured reference), and what dominates them."""

    minutes: float | None
    why: str

    @property
    def over_an_hour(self) -> bool:
        return self.minutes is not None and self.minutes > HOUR


def estimate(units: list[UnitSpec], training_group: Callable[[UnitSpec], str | None]) -> Estimate:
    """The minutes of `units` (each checkpoint trained once: `training_group` names the checkpoint a unit needs)."""
    if not units:
        return Estimate(0.0, "")
    first = units[0].config
    if first["budget"] == "paper" and str(first["device"]).startswith("cpu"):
        trains = sorted({u.model for u in units if training_group(u) is not None})
        if trains:
            return Estimate(float("inf"), f"budget=paper trains the published sizes for {', '.join(trains)}: "
                                          "hours each on a CPU (meant for a GPU)")
        return Estimate(None, "")
    if first["budget"] != "quick":
        return Estimate(None, "")
    total, notes, trained = 0.0, [], set()
    for unit in units:
        minutes = _measuring(unit)
        if minutes is None:
            return Estimate(None, f"no measured reference for {unit.name}")
        group = training_group(unit)
        if group is not None and group not in trained and unit.suite in ("accuracy", "robustness"):
            trained.add(group)
            train = unit.config["train"]
            base = QUICK_TRAINING.get(unit.model)
            if base is None:
                return Estimate(None, f"no measured reference for training {unit.model}")
            passes = 1 + int(train["adv_steps"]) if train.get("adversarial") else 1
            minutes += base * passes
            if passes > 1:
                notes.append(f"{unit.model} trained adversarially: {passes} forward-backward passes per batch")
        total += minutes
    return Estimate(total, "; ".join(dict.fromkeys(notes)))


def _measuring(unit: UnitSpec) -> float | None:
    if unit.suite in QUICK_PER_UNIT:
        return QUICK_PER_UNIT[unit.suite]
    params = unit.config.get("params") or {}
    if unit.suite == "robustness" and params.get("detection_fpr") is not None:
        return QUICK_DETECTION.get(unit.model)
    return QUICK_MEASURING.get((unit.suite, unit.model))
