"""Models with weights trained elsewhere (weights.<model>=PATH, or a model instance given to capsbench.evaluate):
built with their arguments and loaded strictly instead of trained; `capsbench train` fine-tunes from them.

Kept apart from capsbench.train.trained so that the adapter and the weights loader are no part of the code hashed
into every built-in model's checkpoint key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from capsbench.data import Splits
from capsbench.errors import CapsbenchError
from capsbench.models import Classifier, create_model
from capsbench.models.weights import load_weights
from capsbench.train.protocols import TrainingProtocol
from capsbench.train.trained import external_weights, model_config
from capsbench.util.hashing import file_sha256


def external_model(cfg: DictConfig, name: str, seed: int, splits: Splits, protocol: TrainingProtocol) -> Classifier:
    """Model `name` with the unit's external weights, on the unit's device, not trained."""
    torch.manual_seed(seed)  # only for a factory that draws something at construction; the weights replace the rest
    model = create_model(name, **model_config(cfg, name, splits, protocol))
    load_external(model, name, external_weights(cfg) or {})
    return model.to(cfg.device)


def load_external(model: Classifier, name: str, weights: dict[str, Any]) -> None:
    """Load the unit's weights file into `model`, first checking that it is the file the run was planned with."""
    if weights.get("path") is None:  # a model instance (capsbench.evaluate): its copy holds its weights already
        return
    path, where = Path(weights["path"]), f"weights.{name}={weights['path']}"
    if not path.is_file() or file_sha256(path) != weights["sha256"]:
        raise CapsbenchError(f"{where}: the file is gone or changed since the run was planned; run the command again")
    load_weights(model, path, where, name)
