"""The plan: a composed suite config expanded into its units, each carrying its fully resolved model and training
settings. The one place where per-model settings (model_args.<model>, model_train.<model>) are resolved for a run."""

from __future__ import annotations

from typing import Any

from omegaconf import DictConfig, OmegaConf

from capsbench.config.per_model import model_trains
from capsbench.run.external import EXTERNAL, outside_settings
from capsbench.run.units import UNIT_KEYS, UnitSpec
from capsbench.suites import SUITES

TRAIN_COMMAND_SUITE = "accuracy"  # `capsbench train` trains what suite=accuracy would: the dataset's own protocol


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
        outside = outside_settings(cfg, model)  # an outside model's source, external weights (not trained)
        for variant in suite.variants(cfg, model):
            model_args = {**(base["model_args"].get(model) or {}), **variant.model_args}
            config = {k: base[k] for k in UNIT_KEYS if k != "train"}
            config.update(train=train, model_args={model: model_args}, **outside)
            trained_so = {"training": EXTERNAL} if "weights" in outside else training_column(train)
            columns = {**variant.columns, **(trained_so if suite.needs_training or "weights" in outside else {})}
            units += [UnitSpec(cfg.suite, model, seed, columns, config) for seed in cfg.seeds]
    return units


def training_unit(cfg: DictConfig, model: str, seed: int) -> UnitSpec:
    """The unit whose checkpoint `capsbench train model=<model> seed=<seed>` trains (or finds in the cache); with
    weights.<model>=PATH it fine-tunes them (a key of its own)."""
    base = OmegaConf.to_container(cfg, resolve=True)
    config: dict[str, Any] = {k: base[k] for k in UNIT_KEYS if k != "train"}
    config.update(suite=TRAIN_COMMAND_SUITE, params=None, model_args={model: base["model_args"].get(model) or {}},
                  train=OmegaConf.to_container(model_trains(cfg)[model], resolve=True), **outside_settings(cfg, model))
    return UnitSpec(TRAIN_COMMAND_SUITE, model, seed, {}, config)


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
