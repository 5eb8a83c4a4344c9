"""Trained models: from the checkpoint cache when their key is there, else trained now; the key is a hash of everything
that determines the weights."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from capsbench.data import SPLIT_SEED, Splits
from capsbench.models import MODELS, Classifier, create_model
from capsbench.train.adversarial import adversarial_identity
from capsbench.train.checkpoints import CheckpointCache
from capsbench.train.loop import fit
from capsbench.train.protocols import TrainingProtocol, dataset_protocol
from capsbench.util.hashing import content_key, source_identity, training_roots
from capsbench.util.version import __version__

log = logging.getLogger(__name__)


@dataclass
class TrainedModel:
    """A model with its best-validation weights loaded, and how it got them."""

    model: Classifier
    key: str
    path: Path
    meta: dict[str, Any]
    cached: bool


def default_protocol(cfg: DictConfig) -> TrainingProtocol:
    """The dataset's own training protocol (Sabour's shifts, crops, or pad-crop-flip)."""
    return dataset_protocol(cfg.dataset, cfg.data.max_shift)


def model_config(cfg: DictConfig, name: str, splits: Splits, protocol: TrainingProtocol) -> dict[str, Any]:
    """Every constructor argument of model `name`: registry defaults < budget/suite/CLI model_args < data."""
    args = MODELS.get(name).arguments()
    args.update(OmegaConf.to_container(cfg.model_args).get(name) or {})
    spec = splits.spec
    args.update(
        in_channels=spec.in_channels, image_size=protocol.input_size(spec.image_size), num_classes=spec.num_classes
    )
    return {k: list(v) if isinstance(v, (tuple, list)) else v for k, v in args.items()}


def training_identity(
    cfg: DictConfig, name: str, seed: int, splits: Splits, protocol: TrainingProtocol
) -> dict[str, Any]:
    """Everything that changes the trained weights; its hash is the checkpoint's cache key. "source" hashes the code
    that trains the model (its modules, the training loop, protocol and data pipeline) by content, wherever it lives
    (capsbench.util.hashing); which file has which hash is in the checkpoint's meta, source_files."""
    d = cfg.data
    identity = {
        "capsbench": __version__,
        "torch": str(torch.__version__),  # TorchVersion is not a str to a weights-only load
        "source": {"hash": training_source(name, splits, protocol)[0]},
        "model": name,
        "model_args": model_config(cfg, name, splits, protocol),
        "data": {
            "dataset": splits.name,
            "val_size": d.val_size,
            "train_subset": d.train_subset,
            "val_subset": d.val_subset,
            "split_seed": SPLIT_SEED,
        },
        "protocol": protocol.identity(),
        "train": train_settings_identity(cfg.train),
        "seed": seed,
        "device": device_identity(cfg),
    }
    if (init := external_weights(cfg)) is not None:  # fine-tuning weights trained elsewhere: only then, keys unchanged
        identity["init"] = {"weights_sha256": init["sha256"]}
    return identity


def device_identity(cfg: DictConfig) -> dict[str, Any]:
    """What of the device changes trained weights, so that runs on other devices never share a checkpoint: on a CPU
    the intra-op threads (they set the summation order of convolutions: 2 and 4 threads trained cnn_9x9 to 81 and
    84 %) and the instruction set torch dispatches to; on a GPU its kind."""
    device = ("cuda" if torch.cuda.is_available() else "cpu") if cfg.device == "auto" else cfg.device  # a plan's
    kind = torch.device(device).type
    if kind != "cpu":
        return {"type": kind}
    threads = cfg.threads if cfg.threads is not None else torch.get_num_threads()
    return {"type": "cpu", "threads": int(threads), "isa": torch.backends.cpu.get_cpu_capability()}


def external_weights(cfg: DictConfig) -> dict[str, Any] | None:
    """The unit's weights trained elsewhere ({"path", "sha256"}, capsbench.run.external), or None."""
    weights = cfg.get("weights")
    return dict(weights) if isinstance(weights, DictConfig) and "sha256" in weights else None


def training_source(name: str, splits: Splits, protocol: TrainingProtocol) -> tuple[str, dict[str, str]]:
    """The code hash of model `name`'s training, and its per-module hashes (see capsbench.util.hashing)."""
    return source_identity(training_roots(MODELS.get(name).target, protocol, splits.spec.load))


def train_settings_identity(t: DictConfig) -> dict[str, Any]:
    """The train.* settings that change the weights (the "train" part of training_identity; launchers group units by
    it too, capsbench.run.execute.training_group). A setting at its default is left out, so checkpoints trained
    before it existed keep their keys."""
    train: dict[str, Any] = {"epochs": t.epochs, "batch_size": t.batch_size, "lr": t.lr, "lr_decay": t.lr_decay}
    if t.target_val_accuracy is not None:  # only when set, so checkpoints trained without it keep their keys
        train["target_val_accuracy"] = t.target_val_accuracy
    if t.compile:  # compile and bf16 change rounding; only when on, so fp32 eager checkpoints keep their keys
        train["compile"] = True
    if t.precision != "fp32":
        train["precision"] = t.precision
    if t.optimizer != "adam":  # likewise the optimizer settings: only where they differ from Adam's defaults
        train.update(optimizer=t.optimizer, momentum=t.momentum)
    if t.weight_decay:
        train["weight_decay"] = t.weight_decay
    if t.lr_milestones:
        train["lr_milestones"] = list(t.lr_milestones)
    if t.warmup_epochs:
        train["warmup_epochs"] = t.warmup_epochs
    if (adversarial := adversarial_identity(t)) is not None:
        train["adversarial"] = adversarial
    return train


def obtain_model(
    cfg: DictConfig,
    name: str,
    seed: int,
    splits: Splits,
    protocol: TrainingProtocol | None = None,
    on_epoch: Callable[[dict[str, float]], None] | None = None,
    prepare: Callable[[Classifier], None] | None = None,
) -> TrainedModel:
    """The trained model from the cache when its key is there (and retrain is off), else train it now (each epoch's
    history row to `on_epoch` as it is validated).

    cfg holds the unit's settings: train is already this model's own (model_train.<name> merged in by the planner).
    prepare: applied to the fresh model before it trains (fine-tuning: loads the weights it starts from).
    """
    protocol = protocol or default_protocol(cfg)
    identity = training_identity(cfg, name, seed, splits, protocol)
    key = content_key(identity)
    cache = CheckpointCache(cfg.cache_dir)
    torch.manual_seed(seed)
    model = create_model(name, **identity["model_args"]).to(cfg.device)
    if cfg.retrain:
        cache.discard(key)
    elif (done := cache.load(key, expected=model.state_dict())) is not None:
        model.load_state_dict(done["state_dict"])
        log.info("%s seed %d: cached checkpoint %s", name, seed, cache.path(key))
        return TrainedModel(model, key, cache.path(key), done["meta"], cached=True)

    if prepare is not None:  # e.g. load weights trained elsewhere, to fine-tune them (capsbench.train.external)
        prepare(model)
    resume = cache.load_partial(key, expected=model.state_dict())
    if resume is not None:
        log.info("%s seed %d: resuming after epoch %d", name, seed, resume["epoch"] + 1)
    start = time.perf_counter()
    meta = fit(
        model,
        splits,
        cfg,
        protocol,
        seed=seed,
        resume=resume,
        save_progress=lambda state: cache.save_partial(key, state),
        on_epoch=on_epoch,
        desc=f"{name} s{seed}",
    )
    meta.update(
        identity=identity,
        source_files=training_source(name, splits, protocol)[1],
        train_seconds=time.perf_counter() - start + (resume or {}).get("seconds", 0.0),
    )
    path = cache.save(key, {"state_dict": model.state_dict(), "meta": meta})
    return TrainedModel(model, key, path, meta, cached=False)
