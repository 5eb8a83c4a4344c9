"""Each model's own training settings: the run's train.* updated by model_train.<model>, resolved in one place."""

from __future__ import annotations

import dataclasses

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from capsbench.config.schema import TrainConfig
from capsbench.config.shape import describe_error
from capsbench.errors import CapsbenchError
from capsbench.util.registry import close_matches


def model_trains(cfg: DictConfig) -> dict[str, DictConfig]:
    """{model: its train settings} for every model of the run and every model named under model_train."""
    return {name: _merged(cfg, name) for name in dict.fromkeys([*cfg.models, *cfg.model_train])}


def _merged(cfg: DictConfig, name: str) -> DictConfig:
    """cfg.train with model_train.<name> merged in (cfg.train itself when the model has no overrides)."""
    overrides = cfg.model_train.get(name)
    if not overrides:
        return cfg.train
    if not isinstance(overrides, DictConfig):
        raise CapsbenchError(f"model_train.{name} must map train keys to values, e.g. model_train.{name}.lr=0.01")
    valid = [f.name for f in dataclasses.fields(TrainConfig)]
    for key in overrides:
        if key not in valid:
            raise CapsbenchError(f"unknown key model_train.{name}.{key}: {close_matches(str(key), valid)}")
    try:
        return OmegaConf.merge(cfg.train, overrides)  # type: ignore[return-value]
    except OmegaConfBaseException as exc:
        raise CapsbenchError(f"bad value in model_train.{name}: {describe_error(exc)}") from None
