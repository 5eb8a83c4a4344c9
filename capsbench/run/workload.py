"""What each unit of a plan costs, declared before anything runs, so that the units' progress and time left weigh a
unit by its work (epochs x training images, test images x attack steps) rather than count units as equal."""

from __future__ import annotations

from dataclasses import dataclass

from capsbench.data import DATASETS
from capsbench.run.execute import training_group
from capsbench.run.units import UnitSpec
from capsbench.suites import SUITES

TRAIN_PASSES = 3  # a training step: a forward pass and a backward pass of about twice its cost, per image


@dataclass(frozen=True)
class Work:
    """A unit's declared work in image passes: training its checkpoint (0 when another unit of the plan trains it)
    and measuring."""

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
    """Declared work per unit key. Units that share a checkpoint (capsbench.run.execute.training_group) count its
    training once, on the first of them; whether the checkpoint is already in the cache is known only when a unit
    reports back (UnitResult.params["checkpoint.cached"]), and the driver then takes that training off."""
    trained: set[str] = set()
    out = {}
    for unit in units:
        group = training_group(unit)
        train = 0.0
        if group is not None and group not in trained:
            trained.add(group)
            train = training_work(unit)
        out[unit.key] = Work(train, SUITES.get(unit.suite)().work(unit.run_config()))
    return out
