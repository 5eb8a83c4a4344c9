"""Running one unit anywhere: load the data, train or reuse its checkpoint, measure, draw its figures, and hand back
a UnitResult. A pure function of the UnitSpec; it never logs to MLflow or writes tables (the driver does): what it says
while it runs (started, each training epoch) goes to an event sink that the launcher carries back to the driver."""

from __future__ import annotations

import functools
import json
import logging
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from capsbench.data import DATASETS, Splits, load_splits
from capsbench.data.test_subset import DrawnSplits, with_test_subset
from capsbench.models import create_model
from capsbench.models.weights import state_sha256
from capsbench.reporting.figures import save_figure
from capsbench.run.external import WEIGHTS_COLUMN, ensure_registered
from capsbench.run.units import UnitEvent, UnitResult, UnitSpec
from capsbench.suites import CATALOG, SUITES, Context, Suite
from capsbench.tracking.environment import machine_tags
from capsbench.train.external import external_model, load_external
from capsbench.train.step import auto_threads
from capsbench.train.trained import (
    TrainedModel,
    external_weights,
    model_config,
    obtain_model,
)
from capsbench.util import progress

log = logging.getLogger(__name__)
Sink = Callable[[UnitEvent], None]  # where a unit's events go (the launcher's channel back to the driver)
MEASURED_EVERY = 2.0  # seconds between a unit's "measured" events


def _ignore(event: UnitEvent) -> None:
    """The sink of a unit whose events nobody reads."""


def _measuring(spec: UnitSpec, emit: Sink) -> Callable[[float], None]:
    """progress.measured's listener while the unit measures: its passes so far as a "measured" event, at most one every
    MEASURED_EVERY seconds (the driver credits them to the units' bar)."""
    last = [float("-inf")]

    def listener(passes: float) -> None:
        if time.monotonic() - last[0] >= MEASURED_EVERY:
            last[0] = time.monotonic()
            emit(UnitEvent(spec.key, "measured", {"passes": passes}, host=platform.node()))

    return listener


def _epochs(spec: UnitSpec, emit: Sink) -> Callable[[dict[str, float]], None]:
    """The training loop's per-epoch callback, sending each history row as an "epoch" event of `spec`."""
    return lambda row: emit(UnitEvent(spec.key, "epoch", row, host=platform.node()))


def execute(spec: UnitSpec, emit: Sink = _ignore) -> UnitResult:
    """Train or reuse, then measure one unit, sending "started" and each training epoch to `emit` as they happen.
    Exceptions propagate: launchers decide about retries and failures."""
    emit(UnitEvent(spec.key, "started", host=platform.node()))
    start = time.perf_counter()
    ensure_registered(spec.model, spec.config)  # an external model, in a worker process that does not know it yet
    cfg = _process_settings(spec)
    suite = SUITES.get(spec.suite)()
    splits = load_data(cfg.dataset, cfg.data) if CATALOG.get(spec.suite).needs_data else no_images(cfg.dataset)
    protocol = suite.protocol(cfg)
    resources = _resources(suite, cfg, splits)
    result = UnitResult(key=spec.key, spec=spec, status="done", host=platform.node(), machine=machine_tags())
    model, model_args, undertrained = _model(suite, cfg, spec, splits, protocol, result, _epochs(spec, emit))
    ctx = Context(model=model.eval(), model_name=spec.model, splits=splits, params=cfg.params, device=cfg.device,
                  batch_size=cfg.train.eval_batch_size, seed=spec.seed, protocol=protocol, resources=resources,
                  model_args=model_args)
    flag = {} if undertrained is None else {"undertrained": undertrained}
    if isinstance(splits, DrawnSplits):
        flag.update(splits.draw.columns())  # which test images: the same for every model and seed of the run
    if (weights := external_weights(cfg)) is not None:
        flag[WEIGHTS_COLUMN] = weights.get("tensors_sha256", weights["sha256"])  # an instance's sha256 is its tensors'
    with progress.on_measured(_measuring(spec, emit)):
        measured = suite.measure(ctx)
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
        for r in measured
    ]
    suffix = "".join(f"-{k}{v}" for k, v in spec.variant.items())
    figures = Path(cfg.output_dir) / spec.suite / "units" / spec.key / "figures"  # by the unit's key: never replaced
    result.figures = [
        str(p)
        for name, fig in suite.figures(ctx).items()
        for p in save_figure(fig, figures / f"{name}-{spec.model}{suffix}-s{spec.seed}")
    ]
    result.seconds = time.perf_counter() - start
    return result


def train_only(spec: UnitSpec, emit: Sink = _ignore) -> str | None:
    """Train (or find in the cache) the checkpoint the unit would measure, so that every unit sharing it finds it there;
    its cache key, or None for a suite that trains nothing or a unit measuring external weights as they are. Launchers
    run it once per training_group; its events are those of `spec` (the group's first unit), whose run thus starts
    when its training does."""
    if not SUITES.get(spec.suite).needs_training or "weights" in spec.config:
        return None
    emit(UnitEvent(spec.key, "started", host=platform.node()))
    return trained(spec, emit).key


def trained(spec: UnitSpec, emit: Sink = _ignore) -> TrainedModel:
    """The trained model of a unit whose suite trains one (from the cache, or trained now; fine-tuned from its
    external weights when it has some)."""
    ensure_registered(spec.model, spec.config)
    cfg = _process_settings(spec)
    suite = SUITES.get(spec.suite)()
    splits = load_data(cfg.dataset, cfg.data)
    weights = external_weights(cfg)
    start = None if weights is None else functools.partial(load_external, name=spec.model, weights=weights)
    return obtain_model(cfg, spec.model, spec.seed, splits, suite.protocol(cfg), on_epoch=_epochs(spec, emit),
                        prepare=start)


def training_group(spec: UnitSpec) -> str | None:
    """Which checkpoint the unit trains or reuses (its cache and the planner's key): units of one group need the same
    checkpoint. None for a unit that trains nothing."""
    return None if spec.checkpoint is None else f"{spec.config['cache_dir']}/{spec.checkpoint}"


def _process_settings(spec: UnitSpec) -> DictConfig:
    """The unit's config, with torch's thread count (the spec's: the driver fixes it, capsbench.run.driver) and
    matmul precision set for this process, whatever the launcher set before."""
    cfg = spec.run_config()
    torch.set_num_threads(cfg.threads if cfg.threads is not None else auto_threads())
    torch.set_float32_matmul_precision("highest")  # TF32 off: numbers must not depend on the GPU generation
    return cfg


def load_data(dataset: str, data: DictConfig) -> Splits:
    """The dataset's splits for these data settings (data.*), the test split reduced to the drawn test subset
    (data.test_subset, test_subset_draw, test_subset_seed), loaded once per process for every unit that reads them."""
    return _splits(json.dumps({"dataset": dataset, **OmegaConf.to_container(data, resolve=True)}, sort_keys=True))


def no_images(dataset: str) -> Splits:
    """Empty splits of the dataset's shape, for a suite that measures models, not images (no file is read)."""
    spec = DATASETS.get(dataset)
    size = spec.train_crop or spec.image_size
    x, y = torch.empty(0, spec.in_channels, size, size, dtype=torch.uint8), torch.empty(0, dtype=torch.int64)
    return Splits(dataset, x, y, x, y, x, y, spec)


@functools.lru_cache(maxsize=2)
def _splits(data_json: str) -> Splits:
    """The dataset's splits, loaded once per process for every unit that reads the same data settings."""
    d = json.loads(data_json)
    whole = load_splits(
        d["dataset"],
        root=Path(d["root"]),
        download=d["download"],
        val_size=d["val_size"],
        train_subset=d["train_subset"],
        val_subset=d["val_subset"],
    )
    return with_test_subset(whole, d["test_subset"], draw=d["test_subset_draw"], seed=d["test_subset_seed"])


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
    suite: Suite, cfg: DictConfig, spec: UnitSpec, splits: Splits, protocol: Any, result: UnitResult,
    on_epoch: Callable[[dict[str, float]], None],
) -> tuple[torch.nn.Module, dict[str, Any], bool | None]:
    """A trained model from the checkpoint cache (or trained now), one loaded from external weights, or a fresh seeded
    one for suites that need no weights; whether a trained one is undertrained (None: not trained). Fills the
    result's params, metrics and curves."""
    if (weights := external_weights(cfg)) is not None:  # trained elsewhere: loaded, never trained here
        args = model_config(cfg, spec.model, splits, protocol)
        result.params = {"weights.path": weights["path"], "weights.sha256": weights["sha256"],
                         "weights.tensors_sha256": weights.get("tensors_sha256", weights["sha256"]),
                         **{f"model_args.{k}": v for k, v in args.items()}}
        return external_model(cfg, spec.model, spec.seed, splits, protocol), args, None
    if not suite.needs_training:
        args = model_config(cfg, spec.model, splits, protocol)
        torch.manual_seed(spec.seed)
        model = create_model(spec.model, **args)
        result.params = {"weights.tensors_sha256": state_sha256(model),
                         **{f"model_args.{k}": v for k, v in args.items()}}
        return model.to(cfg.device), args, None
    start = time.perf_counter()
    trained = obtain_model(cfg, spec.model, spec.seed, splits, protocol, on_epoch=on_epoch)
    result.train_seconds = 0.0 if trained.cached else time.perf_counter() - start
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
        "weights.tensors_sha256": state_sha256(trained.model),  # the measured weights by content (model cards)
        **{f"model_args.{k}": v for k, v in args.items()},
    }
    result.metrics = {"best_val_accuracy": val}
    result.curves = [dict(h) for h in trained.meta["history"]]
    return trained.model, args, val < floor
