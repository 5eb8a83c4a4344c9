"""Running one unit anywhere: load the data, train or reuse its checkpoint, measure, draw its figures, and hand back
a UnitResult. A pure function of the UnitSpec; it never logs to MLflow or writes tables (the driver does)."""

from __future__ import annotations

import functools
import json
import logging
import platform
import time
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from capsbench.data import Splits, load_splits
from capsbench.models import create_model
from capsbench.reporting.figures import save_figure
from capsbench.run.units import UnitResult, UnitSpec
from capsbench.suites import SUITES, Context, Suite
from capsbench.tracking.environment import machine_tags
from capsbench.train.step import auto_threads
from capsbench.train.trained import TrainedModel, model_config, obtain_model, train_settings_identity

log = logging.getLogger(__name__)


def execute(spec: UnitSpec) -> UnitResult:
    """Train or reuse, then measure one unit. Exceptions propagate: launchers decide about retries and failures."""
    start = time.perf_counter()
    cfg = _process_settings(spec)
    suite = SUITES.get(spec.suite)()
    splits = load_data(cfg.dataset, cfg.data)
    protocol = suite.protocol(cfg)
    resources = _resources(suite, cfg, splits)
    result = UnitResult(key=spec.key, spec=spec, status="done", host=platform.node(), machine=machine_tags())
    model, model_args, undertrained = _model(suite, cfg, spec, splits, protocol, result)
    ctx = Context(model=model.eval(), model_name=spec.model, splits=splits, params=cfg.params, device=cfg.device,
                  batch_size=cfg.train.eval_batch_size, seed=spec.seed, protocol=protocol, resources=resources,
                  model_args=model_args)
    flag = {} if undertrained is None else {"undertrained": undertrained}
    result.records = [
        {
            "suite": spec.suite,
            "model": spec.model,
            "dataset": spec.dataset,
            "seed": spec.seed,
            **spec.variant,
            **r,
            **flag,
        }
        for r in suite.measure(ctx)
    ]
    suffix = "".join(f"-{k}{v}" for k, v in spec.variant.items())
    figures = Path(cfg.output_dir) / spec.suite / "figures"
    result.figures = [
        str(p)
        for name, fig in suite.figures(ctx).items()
        for p in save_figure(fig, figures / f"{name}-{spec.model}{suffix}-s{spec.seed}")
    ]
    result.seconds = time.perf_counter() - start
    return result


def train_only(spec: UnitSpec) -> str | None:
    """Train (or find in the cache) the checkpoint the unit would measure, so that every unit sharing it finds it there;
    its cache key, or None for a suite that trains nothing. Launchers run it once per training_group."""
    if not SUITES.get(spec.suite).needs_training:
        return None
    return trained(spec).key


def trained(spec: UnitSpec) -> TrainedModel:
    """The trained model of a unit whose suite trains one (from the cache, or trained now)."""
    cfg = _process_settings(spec)
    suite = SUITES.get(spec.suite)()
    splits = load_data(cfg.dataset, cfg.data)
    return obtain_model(cfg, spec.model, spec.seed, splits, suite.protocol(cfg))


def training_group(spec: UnitSpec) -> str | None:
    """Which checkpoint the unit trains or reuses, told without loading data: units with the same group need the same
    checkpoint (model and its arguments, seed, dataset and training subsets, train settings, training protocol, cache).
    None for a suite that trains nothing. It mirrors training.training_identity; the code and versions are this one."""
    suite = SUITES.get(spec.suite)()
    if not suite.needs_training:
        return None
    cfg = spec.run_config()
    d = cfg.data
    group = {
        "model": spec.model,
        "seed": spec.seed,
        "dataset": cfg.dataset,
        "cache_dir": cfg.cache_dir,
        "model_args": OmegaConf.to_container(cfg.model_args)[spec.model],
        "data": {k: d[k] for k in ("val_size", "train_subset", "val_subset")},
        "train": train_settings_identity(cfg.train),  # optimizer, warm-up, adversarial, compile ... as in the key
        "protocol": suite.protocol(cfg).identity(),
    }
    return json.dumps(group, sort_keys=True, default=str)


def _process_settings(spec: UnitSpec) -> DictConfig:
    """The unit's config, with torch's thread count and matmul precision set for this process."""
    cfg = spec.run_config()
    torch.set_num_threads(cfg.threads if cfg.threads is not None else auto_threads())
    torch.set_float32_matmul_precision("highest")  # TF32 off: numbers must not depend on the GPU generation
    return cfg


def load_data(dataset: str, data: DictConfig) -> Splits:
    """The dataset's splits for these data settings (data.*), loaded once per process for every unit that reads them."""
    return _splits(json.dumps({"dataset": dataset, **OmegaConf.to_container(data, resolve=True)}, sort_keys=True))


@functools.lru_cache(maxsize=2)
def _splits(data_json: str) -> Splits:
    """The dataset's splits, loaded once per process for every unit that reads the same data settings."""
    d = json.loads(data_json)
    return load_splits(
        d["dataset"],
        root=Path(d["root"]),
        download=d["download"],
        val_size=d["val_size"],
        train_subset=d["train_subset"],
        val_subset=d["val_subset"],
        test_subset=d["test_subset"],
    )


_RESOURCES: dict[str, Any] = {}


def _resources(suite: Suite, cfg: DictConfig, splits: Splits) -> Any:
    """What the suite prepares once (e.g. a generated test set), kept per process for units with the same settings."""
    settings = OmegaConf.to_container(
        OmegaConf.masked_copy(cfg, ["dataset", "data", "params", "cache_dir"]), resolve=True
    )
    key = json.dumps([suite.name, settings], sort_keys=True, default=str)
    if key not in _RESOURCES:
        _RESOURCES[key] = suite.prepare(cfg, splits)
    return _RESOURCES[key]


def _model(
    suite: Suite, cfg: DictConfig, spec: UnitSpec, splits: Splits, protocol: Any, result: UnitResult
) -> tuple[torch.nn.Module, dict[str, Any], bool | None]:
    """A trained model from the checkpoint cache (or trained now), or a fresh seeded one for suites that need no
    weights;
    whether a trained one is undertrained (None: not trained). Fills the result's params, metrics and curves."""
    if not suite.needs_training:
        args = model_config(cfg, spec.model, splits, protocol)
        torch.manual_seed(spec.seed)
        result.params = {f"model_args.{k}": v for k, v in args.items()}
        return create_model(spec.model, **args).to(cfg.device), args, None
    trained = obtain_model(cfg, spec.model, spec.seed, splits, protocol)
    val, floor = 100.0 * trained.meta["best_val_accuracy"], protocol.min_validation_score(splits.spec)
    if val < floor:
        log.warning(
            "%s seed %d is undertrained: best validation score %.2f %% is below the floor of %.1f %% for %s; "
            "it is flagged in the records and tables and never counted as best",
            spec.model,
            spec.seed,
            val,
            floor,
            splits.name,
        )
    args = trained.meta["identity"]["model_args"]
    result.params = {
        "checkpoint.key": trained.key,
        "checkpoint.path": str(trained.path),
        "checkpoint.cached": trained.cached,
        "checkpoint.best_epoch": trained.meta["best_epoch"],
        "checkpoint.train_threads": trained.meta.get("threads"),  # None: trained before it was recorded
        **{f"model_args.{k}": v for k, v in args.items()},
    }
    result.metrics = {"best_val_accuracy": val}
    result.curves = [dict(h) for h in trained.meta["history"]]
    return trained.model, args, val < floor
