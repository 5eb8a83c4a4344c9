"""What each unit of a plan costs, declared before anything runs (a checkpoint already in the cache costs no
training), so that the units' progress and time left weigh a unit by its work (epochs x training images, test images x
attack steps) rather than count units as equal; and the work credited as the units report it (each training epoch,
each "measured" event), so that the bar moves while a unit runs and its time left converges."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

from capsbench.data import DATASETS
from capsbench.run.execute import training_group
from capsbench.run.units import UnitEvent, UnitResult, UnitSpec
from capsbench.suites import SUITES
from capsbench.train.checkpoints import CheckpointCache
from capsbench.train.trained import training_identity
from capsbench.util.hashing import content_key

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
    training once, on the first of them, and none when the checkpoint is in the cache already."""
    trained: set[str] = set()
    out = {}
    for unit in units:
        group = training_group(unit)
        train = 0.0
        if group is not None and group not in trained:
            trained.add(group)
            train = 0.0 if checkpoint_cached(unit) else training_work(unit)
        out[unit.key] = Work(train, SUITES.get(unit.suite)().work(unit.run_config()))
    return out


def checkpoint_cached(unit: UnitSpec) -> bool:
    """Whether the checkpoint the unit trains is in the cache (its key, from the dataset's description alone: no data
    is read); a wrong guess only misjudges the time left."""
    cfg = unit.run_config()
    if cfg.retrain:
        return False
    described = SimpleNamespace(name=cfg.dataset, spec=DATASETS.get(cfg.dataset))  # what the key reads of the splits
    identity = training_identity(cfg, unit.model, unit.seed, described, SUITES.get(unit.suite)().protocol(cfg))
    return CheckpointCache(cfg.cache_dir).path(content_key(identity)).is_file()


class Credits:
    """The work of each unit credited as it happens: its training's share per epoch, its measuring as the unit reports
    it ("measured" events: passes so far), and whatever is left when it ends; never more than its declared work."""

    def __init__(self, work: dict[str, Work], units: list[UnitSpec]) -> None:
        self.work = work
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
            return self._credit(self.measured, event.key, min(w.measure, float(event.data["passes"])))
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
