"""The plan the driver runs: sections (a composed suite config expanded into its units, each carrying its fully
resolved model and training settings) and an optional finish step over all of them, as a task group runs through one
evaluator. The one place where per-model settings (model_args.<model>, model_train.<model>) are resolved for a run."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from omegaconf import DictConfig, OmegaConf

from capsbench.config.per_model import model_trains
from capsbench.run.external import EXTERNAL, external_settings
from capsbench.run.units import UNIT_KEYS, UnitSpec
from capsbench.suites import SUITES

TRAIN_COMMAND_SUITE = "accuracy"  # `capsbench train` trains what suite=accuracy would: the dataset's own protocol


@dataclass
class Section:
    """One composed suite config and its units, written under <run folder>/<folder>/ (copied to <output_dir>/<folder>/).

    Args:
        key: unique within the plan (the suite's name in an ordinary run; e.g. "robustness-mnist-2" for claims).
        cfg: the composed suite config.
        units: its units, in table order.
        folder: where its files go, relative to output_dir.
    """

    key: str
    cfg: DictConfig
    units: list[UnitSpec]
    folder: str


@dataclass
class Finished:
    """What a finish step made of the sections: its files, its Markdown, its headline metrics, the failed units."""

    paths: dict[str, Path]
    markdown: str
    metrics: dict[str, float] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)  # for --format json
    detail: list[Any] = field(default_factory=list)  # the step's own results (the claims' judgements)


class Finish(Protocol):
    """A step after every section of a plan (judging claims): named, and given every section's outcome."""

    name: str  # its parent run's name and suite tag, e.g. "claims"
    params: dict[str, Any]  # logged on that run beside the shared settings

    def __call__(self, sections: list[Any], done: dict[str, Any], run_id: str | None, root: Path) -> Finished:
        """Its files under `root` (<run folder>/<name>) from the sections' outcomes (SuiteResult), every unit's result
        by key, and its parent run."""


@dataclass
class Plan:
    """What one `capsbench run` does: its sections, in order, then its finish step (if any).

    Args:
        cfg: the settings every section shares (output and tracking, launcher, budget, seeds).
        sections: the suite configs and their units.
        finish: the step after every section, with a parent run of its own above the sections' (None: none).
        notes: (logging level, line) said before anything runs (what is planned, what is absent, what is long).
    """

    cfg: DictConfig
    sections: list[Section]
    finish: Finish | None = None
    notes: list[tuple[int, str]] = field(default_factory=list)


def suite_plan(cfgs: list[DictConfig]) -> Plan:
    """An ordinary run: one section per composed suite config, keyed and written by suite name."""
    for cfg in cfgs:
        fix_threads(cfg)
    return Plan(cfgs[0], [Section(cfg.suite, cfg, plan(cfg), cfg.suite) for cfg in cfgs])


def fix_threads(cfg: DictConfig) -> None:
    """One thread count for every unit, in its spec, whatever runs it (recorded in every run's params): threads=,
    else unit_threads(cfg)."""
    if cfg.threads is None:
        cfg.threads = unit_threads(cfg)



def training_column(train: dict[str, Any]) -> dict[str, str]:
    """The record column naming a non-standard training protocol: {"training": "pgd"} (adversarial), "affine"
    (augmented) or "pgd+affine"; {} for standard training, so standard units keep their names and keys."""
    parts = [str(v) for v in (train.get("adversarial"), train.get("augment")) if v]
    return {"training": "+".join(parts)} if parts else {}


def plan(cfg: DictConfig) -> list[UnitSpec]:
    """The units of one composed suite config, in table order: model, then variant, then seed."""
    suite = SUITES.get(cfg.suite)()
    base = OmegaConf.to_container(cfg, resolve=True)
    trains = model_trains(cfg)
    units = []
    for model in cfg.models:
        train = OmegaConf.to_container(trains[model], resolve=True)
        external = external_settings(cfg, model)  # an external model's source, external weights (not trained)
        for variant in suite.variants(cfg, model):
            model_args = {**(base["model_args"].get(model) or {}), **variant.model_args}
            config = {k: base[k] for k in UNIT_KEYS if k != "train"}
            config.update(train=train, model_args={model: model_args}, **external)
            trained_so = {"training": EXTERNAL} if "weights" in external else training_column(train)
            columns = {**variant.columns, **(trained_so if suite.needs_training or "weights" in external else {})}
            units += [UnitSpec(cfg.suite, model, seed, columns, config) for seed in cfg.seeds]
    return [keyed(u) for u in units]


def training_unit(cfg: DictConfig, model: str, seed: int) -> UnitSpec:
    """The unit whose checkpoint `capsbench train model=<model> seed=<seed>` trains (or finds in the cache); with
    weights.<model>=PATH it fine-tunes them (a key of its own)."""
    base = OmegaConf.to_container(cfg, resolve=True)
    config: dict[str, Any] = {k: base[k] for k in UNIT_KEYS if k != "train"}
    config.update(suite=TRAIN_COMMAND_SUITE, params=None, model_args={model: base["model_args"].get(model) or {}},
                  train=OmegaConf.to_container(model_trains(cfg)[model], resolve=True), **external_settings(cfg, model))
    return keyed(UnitSpec(TRAIN_COMMAND_SUITE, model, seed, {}, config))


def keyed(unit: UnitSpec) -> UnitSpec:
    """The unit with the key of the checkpoint it trains or reuses (none for a suite that trains nothing, or weights
    trained elsewhere): computed once here, from settings alone, so launchers group units and the cost model finds
    cached checkpoints without rebuilding it."""
    suite = SUITES.get(unit.suite)()
    if not suite.needs_training or "weights" in unit.config:
        return unit
    from capsbench.train.keys import checkpoint_key  # lazy: torch, which a plan that fails early never needs

    cfg = unit.run_config()
    return replace(unit, checkpoint=checkpoint_key(cfg, unit.model, unit.seed, suite.protocol(cfg)))


def unit_threads(cfg: DictConfig) -> int:
    """The torch threads of every unit when threads= is not given: the CPUs a unit gets where it runs, fixed here
    for every unit of the run. slurm.cpus_per_unit on SLURM (the jobs' nodes are not this machine), ray.cpus_per_unit
    when given, else this machine's auto_threads(): so `launcher=local` and a Ray started here give the same numbers."""
    if cfg.launcher == "slurm":
        return int(cfg.slurm.cpus_per_unit)
    if cfg.launcher == "ray" and cfg.ray.cpus_per_unit is not None:
        return max(1, int(cfg.ray.cpus_per_unit))
    from capsbench.train.step import auto_threads  # lazy: torch, which a plan that fails early never needs

    return auto_threads()
