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
from capsbench.adversarial_training import adversarial_identity, pgd_training_examples
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
    d = cfg.data
    return {
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
        "train": train_settings_identity(cfg.train),
        "seed": seed,
    }


def train_settings_identity(t: DictConfig) -> dict[str, Any]:
    """The train.* settings that change the weights (the "train" part of training_identity; launchers group units by
    it too, capsbench.unit_execution.training_group). A setting at its default is left out, so checkpoints trained
    before it existed keep their keys."""
    train: dict[str, Any] = {"epochs": t.epochs, "batch_size": t.batch_size, "lr": t.lr, "lr_decay": t.lr_decay}
    if t.target_val_accuracy is not None:  # only when set, so checkpoints trained without it keep their keys
        train["target_val_accuracy"] = t.target_val_accuracy
    if t.compile:  # compile and bf16 change rounding; only when on, so fp32 eager checkpoints keep their keys
        train["compile"] = True
    if t.precision != "fp32":
        train["precision"] = t.precision
    if t.optimizer != "adam":  # likewise the optimiser settings: only where they differ from Adam's defaults
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


def optimiser_and_schedule(model: Classifier, t: DictConfig, device: str = "cpu"
                   ) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """Adam (fused where the device allows, see make_optimizer) or SGD with momentum (train.optimizer), and its
    per-epoch schedule: lr x lr_decay after every epoch, or only after the epochs in lr_milestones (He et al.'s
    step schedule)."""
    if t.optimizer == "sgd":
        opt: torch.optim.Optimizer = torch.optim.SGD(
            model.parameters(), lr=t.lr, momentum=t.momentum, weight_decay=t.weight_decay)
    else:
        opt = make_optimizer(model.parameters(), lr=t.lr, device=device, weight_decay=t.weight_decay)
    if t.lr_milestones:
        return opt, torch.optim.lr_scheduler.MultiStepLR(opt, milestones=list(t.lr_milestones), gamma=t.lr_decay)
    return opt, torch.optim.lr_scheduler.ExponentialLR(opt, gamma=t.lr_decay)


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
    """Trains with train.optimizer (Adam by default) and its lr schedule; returns history and loads the
    best-validation weights into `model`.

    With train.target_val_accuracy set, training stops after the first epoch whose validation accuracy (%)
    reaches it (models compared at matched validation accuracy, as in Sabour et al.'s affNIST experiment).

    Every epoch reseeds from (seed, epoch), so a run resumed from its last finished epoch computes
    the same weights as an uninterrupted one. The training and validation splits are moved to the device
    once; batches are cut, converted and augmented there (with a generator on the device when the
    protocol allows it). train.compile and train.precision: see capsbench.train_step.
    """
    t, device = cfg.train, cfg.device
    check_train_settings(t, device)
    opt, sched = optimiser_and_schedule(model, t, device)
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
        train_loss, train_acc = _train_epoch(step, on_device, cfg, protocol, gen, epoch=epoch,
                                             desc=f"{desc} e{epoch + 1}/{t.epochs}")
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
                 epoch: int, desc: str) -> tuple[float, float]:
    step.model.train()
    opt = step.optimizer
    total_loss = torch.zeros((), device=cfg.device)  # running sums stay on the device: no sync per batch
    correct = torch.zeros((), device=cfg.device, dtype=torch.long)
    seen = 0
    n_batches = -(-len(splits.train_x) // cfg.train.batch_size)
    # Linear warm-up over the first warmup_epochs: Adam's first steps are full-size whatever the gradient's scale,
    # which can push whole ReLU layers below zero before training starts (Liu et al., arXiv:1908.03265).
    warmup = cfg.train.warmup_epochs * n_batches
    scheduled = [group["lr"] for group in opt.param_groups]
    bar = tqdm(
        batches(splits.train_x, splits.train_y, cfg.train.batch_size, device=cfg.device, shuffle_generator=gen),
        total=n_batches, desc=desc, leave=False, disable=True if is_quiet() else None,  # None: bar on a TTY only
    )
    for i, (images, labels) in enumerate(bar):
        done = epoch * n_batches + i  # optimiser steps before this one
        if done < warmup:
            for group, lr in zip(opt.param_groups, scheduled):
                group["lr"] = lr * (done + 1) / warmup
        batch = protocol.train_batch(images, labels, gen)
        if cfg.train.adversarial == "pgd":  # Madry et al.: train on the batch's PGD examples instead of the batch
            t = cfg.train
            ramp = min(1.0, (done + 1) / (t.adv_ramp_epochs * n_batches)) if t.adv_ramp_epochs else 1.0
            batch.inputs = pgd_training_examples(step.model, batch.inputs, batch.targets, eps=ramp * t.adv_eps,
                                                 steps=t.adv_steps, step_size=ramp * t.adv_step_size, generator=gen)
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
    for group, lr in zip(opt.param_groups, scheduled):  # the epoch schedule goes on from the un-warmed rate
        group["lr"] = lr
    return total_loss.item() / seen, correct.item() / seen
