"""The training loop (validation-based model selection, resumable) and the checkpoint-cache front door."""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

import capsbench
from capsbench.checkpoints import CheckpointCache, content_key
from capsbench.config import for_model
from capsbench.data import SPLIT_SEED, Splits, batches
from capsbench.models import MODELS, Classifier, create_model
from capsbench.progress import is_quiet
from capsbench.protocols import TrainingProtocol, dataset_protocol
from capsbench.source_hash import source_identity, training_roots
from capsbench.train_step import TrainStep, check_train_settings, make_optimizer

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
    return dataset_protocol(cfg.dataset, cfg.data.max_shift)


def model_config(cfg: DictConfig, name: str, splits: Splits, protocol: TrainingProtocol) -> dict[str, Any]:
    """Every constructor argument of model `name`: registry defaults < budget/suite/CLI model_args < data."""
    args = MODELS.get(name).arguments()
    args.update(OmegaConf.to_container(cfg.model_args).get(name) or {})
    spec = splits.spec
    args.update(in_channels=spec.in_channels, image_size=protocol.input_size(spec.image_size), num_classes=spec.num_classes)
    return {k: list(v) if isinstance(v, (tuple, list)) else v for k, v in args.items()}


def training_identity(cfg: DictConfig, name: str, seed: int, splits: Splits, protocol: TrainingProtocol) -> dict[str, Any]:
    """Everything that changes the trained weights; its hash is the checkpoint's cache key. "source" hashes the code
    that trains the model (its modules, the training loop, protocol and data pipeline; see capsbench.source_hash)."""
    d, t = cfg.data, cfg.train
    identity = {
        "capsbench": capsbench.__version__,
        "torch": str(torch.__version__),  # TorchVersion is not a str to a weights-only load
        "source": source_identity(training_roots(MODELS.get(name).target, protocol, splits.spec.load)),
        "model": name,
        "model_args": model_config(cfg, name, splits, protocol),
        "data": {
            "dataset": splits.name, "val_size": d.val_size, "train_subset": d.train_subset,
            "val_subset": d.val_subset, "split_seed": SPLIT_SEED,
        },
        "protocol": protocol.identity(),
        "train": {"epochs": t.epochs, "batch_size": t.batch_size, "lr": t.lr, "lr_decay": t.lr_decay},
        "seed": seed,
    }
    if t.target_val_accuracy is not None:  # only when set, so checkpoints trained without it keep their keys
        identity["train"]["target_val_accuracy"] = t.target_val_accuracy
    if t.compile:  # compile and bf16 change rounding; only when on, so fp32 eager checkpoints keep their keys
        identity["train"]["compile"] = True
    if t.precision != "fp32":
        identity["train"]["precision"] = t.precision
    return identity


def obtain_model(
    cfg: DictConfig, name: str, seed: int, splits: Splits, protocol: TrainingProtocol | None = None
) -> TrainedModel:
    """The trained model from the cache when its key is there (and retrain is off), else train it now.

    It is trained with the run's train settings updated by model_train.<name> (a model's own recipe).
    """
    cfg = for_model(cfg, name)
    protocol = protocol or default_protocol(cfg)
    identity = training_identity(cfg, name, seed, splits, protocol)
    key = content_key(identity)
    cache = CheckpointCache(cfg.cache_dir)
    torch.manual_seed(seed)
    model = create_model(name, **identity["model_args"]).to(cfg.device)
    if cfg.retrain:
        cache.discard(key)
    elif (done := cache.load(key)) is not None:
        model.load_state_dict(done["state_dict"])
        log.info("%s seed %d: cached checkpoint %s", name, seed, cache.path(key))
        return TrainedModel(model, key, cache.path(key), done["meta"], cached=True)

    resume = cache.load_partial(key)
    if resume is not None:
        log.info("%s seed %d: resuming after epoch %d", name, seed, resume["epoch"] + 1)
    start = time.perf_counter()
    meta = fit(
        model, splits, cfg, protocol, seed=seed, resume=resume,
        save_progress=lambda state: cache.save_partial(key, state), desc=f"{name} s{seed}",
    )
    meta.update(identity=identity, train_seconds=time.perf_counter() - start + (resume or {}).get("seconds", 0.0))
    path = cache.save(key, {"state_dict": model.state_dict(), "meta": meta})
    return TrainedModel(model, key, path, meta, cached=False)


def fit(
    model: Classifier,
    splits: Splits,
    cfg: DictConfig,
    protocol: TrainingProtocol,
    *,
    seed: int,
    resume: dict[str, Any] | None = None,
    save_progress=None,
    desc: str = "train",
) -> dict[str, Any]:
    """Adam with exponential decay; returns history and loads the best-validation weights into `model`.

    With train.target_val_accuracy set, training stops after the first epoch whose validation accuracy (%)
    reaches it (models compared at matched validation accuracy, as in Sabour et al.'s affNIST experiment).

    Every epoch reseeds from (seed, epoch), so a run resumed from its last finished epoch computes
    the same weights as an uninterrupted one. The training and validation splits are moved to the device
    once; batches are cut, converted and augmented there (with a generator on the device when the
    protocol allows it). train.compile and train.precision: see capsbench.train_step.
    """
    t, device = cfg.train, cfg.device
    check_train_settings(t, device)
    opt = make_optimizer(model.parameters(), lr=t.lr, device=device)
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=t.lr_decay)
    history: list[dict[str, float]] = []
    best_acc, best_epoch, best_state, first, reached = -1.0, -1, None, 0, False
    if resume is not None:
        model.load_state_dict(resume["model"])
        opt.load_state_dict(resume["optimizer"])
        sched.load_state_dict(resume["scheduler"])
        history, best_acc, best_epoch = resume["history"], resume["best_val_accuracy"], resume["best_epoch"]
        best_state, first = resume["best_state"], resume["epoch"] + 1
    started = time.perf_counter()
    on_device = dataclasses.replace(  # once per run: batches are then cut on the device, no copy per batch
        splits, train_x=splits.train_x.to(device), train_y=splits.train_y.to(device),
        val_x=splits.val_x.to(device), val_y=splits.val_y.to(device),
    )
    gen_device = device if protocol.augments_on_device else "cpu"
    step = TrainStep(model, opt, device=device, compile_model=t.compile, precision=t.precision)
    threads = torch.get_num_threads()  # set per unit (threads=N, else capsbench.train_step.auto_threads)
    log.info("%s: training on %s with %d intra-op threads (OMP_WAIT_POLICY=%s), %s, %s", desc, device, threads,
             os.environ.get("OMP_WAIT_POLICY", "unset"), t.precision, "compiled" if t.compile else "eager")
    for epoch in range(first, t.epochs):
        epoch_seed = seed * 100_003 + epoch
        torch.manual_seed(epoch_seed)  # dropout and any other global-RNG use
        gen = torch.Generator(device=gen_device).manual_seed(epoch_seed)
        train_loss, train_acc = _train_epoch(step, on_device, cfg, protocol, gen, desc=f"{desc} e{epoch + 1}/{t.epochs}")
        sched.step()
        val_acc = protocol.validation_score(model, on_device, batch_size=t.eval_batch_size, device=device)
        history.append({"epoch": epoch + 1, "train_loss": train_loss, "train_accuracy": train_acc, "val_accuracy": val_acc})
        log.info("%s epoch %d: loss %.4f train acc %.4f val acc %.4f", desc, epoch + 1, train_loss, train_acc, val_acc)
        if val_acc > best_acc:
            best_acc, best_epoch = val_acc, epoch + 1
            best_state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
        if t.target_val_accuracy is not None and 100.0 * val_acc >= t.target_val_accuracy:
            reached = True
            log.info("%s: validation accuracy %.2f %% reached the target %.2f %%; stopping", desc, 100 * val_acc, t.target_val_accuracy)
            break
        if save_progress is not None and epoch + 1 < t.epochs:
            save_progress({
                "model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                "epoch": epoch, "history": history, "best_val_accuracy": best_acc, "best_epoch": best_epoch,
                "best_state": best_state,
                "seconds": time.perf_counter() - started + (resume or {}).get("seconds", 0.0),
            })
    if best_state is not None:
        model.load_state_dict(best_state)
    return {
        "history": copy.deepcopy(history), "best_epoch": best_epoch, "best_val_accuracy": best_acc,
        "reached_target": reached, "threads": threads,  # CPU summation order depends on it: recorded, not keyed
    }


POSTFIX_EVERY = 25  # batches between progress-bar updates: each update syncs a GPU with the host


def _train_epoch(step: TrainStep, splits: Splits, cfg, protocol: TrainingProtocol, gen: torch.Generator, *,
                 desc: str) -> tuple[float, float]:
    step.model.train()
    total_loss = torch.zeros((), device=cfg.device)  # running sums stay on the device: no sync per batch
    correct = torch.zeros((), device=cfg.device, dtype=torch.long)
    seen = 0
    n_batches = -(-len(splits.train_x) // cfg.train.batch_size)
    bar = tqdm(
        batches(splits.train_x, splits.train_y, cfg.train.batch_size, device=cfg.device, shuffle_generator=gen),
        total=n_batches, desc=desc, leave=False, disable=True if is_quiet() else None,  # None: bar on a TTY only
    )
    for i, (images, labels) in enumerate(bar):
        batch = protocol.train_batch(images, labels, gen)
        out, loss = step(batch)
        total_loss += loss.detach() * len(labels)
        scores = out.scores.detach()
        if batch.targets.dim() == 1:  # single-label: running top-1 accuracy on the training batches
            correct += (scores.argmax(dim=1) == batch.targets).sum()
        else:  # multi-hot: a row is right when its k highest scores are exactly its k targets
            ranks = scores.argsort(dim=1, descending=True).argsort(dim=1)  # (B, C): 0 = highest
            predicted = ranks < batch.targets.sum(dim=1, keepdim=True)
            correct += (predicted == batch.targets.bool()).all(dim=1).sum()
        seen += len(labels)
        if bar.disable is False and i % POSTFIX_EVERY == 0:
            bar.set_postfix(loss=f"{total_loss.item() / seen:.4f}", acc=f"{correct.item() / seen:.4f}")
    return total_loss.item() / seen, correct.item() / seen
