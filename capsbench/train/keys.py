"""A checkpoint's key from settings alone, before any data is read: what the planner computes for each unit (its
training identity reads only a dataset's name and description of the splits)."""

from __future__ import annotations

from typing import NamedTuple

from omegaconf import DictConfig

from capsbench.data import DATASETS, DatasetSpec
from capsbench.train.protocols import TrainingProtocol
from capsbench.train.trained import training_identity
from capsbench.util.hashing import content_key


class DatasetRef(NamedTuple):
    """What a checkpoint's key reads of a dataset: its name and description (no images)."""

    name: str
    spec: DatasetSpec


def checkpoint_key(cfg: DictConfig, name: str, seed: int, protocol: TrainingProtocol) -> str:
    """The key of the checkpoint a unit of config `cfg` trains or reuses for model `name` and `seed`: the planner
    computes it, and training finds the same."""
    return content_key(training_identity(cfg, name, seed, DatasetRef(cfg.dataset, DATASETS.get(cfg.dataset)),
                                         protocol))
