"""Runs a composed suite config: plan (models x seeds), obtain checkpoints, measure, track, report."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from capsbench import report
from capsbench.atomic import write_text
from capsbench.config import to_dict, to_yaml
from capsbench.data import Splits, load_splits
from capsbench.plots import save_figure
from capsbench.suites import SUITES, Context
from capsbench.tracking import Tracker, environment_tags, flatten
from capsbench.training import obtain_model

log = logging.getLogger(__name__)


@dataclass
class SuiteResult:
    records: list[dict[str, Any]]
    paths: dict[str, Path]
    markdown: str
    parent_run_id: str | None


def load_data(cfg: DictConfig) -> Splits:
    d = cfg.data
    return load_splits(
        cfg.dataset, root=Path(d.root), download=d.download, val_size=d.val_size,
        train_subset=d.train_subset, val_subset=d.val_subset, test_subset=d.test_subset,
    )


def make_tracker(cfg: DictConfig) -> Tracker:
    return Tracker(
        uri=cfg.tracking.uri, experiment=cfg.tracking.experiment,
        artifact_root=Path(cfg.output_dir) / "mlartifacts", enabled=cfg.tracking.enabled,
    )


def run_suite(cfg: DictConfig) -> SuiteResult:
    """Measure every (model, seed) of the suite and write its records and tables under <output_dir>/<suite>/."""
    suite_cls = SUITES.get(cfg.suite)
    suite = suite_cls()
    splits = load_data(cfg)
    torch.set_float32_matmul_precision("highest")  # TF32 off: numbers must not depend on the GPU generation
    tracker = make_tracker(cfg)
    tags = {**environment_tags(cfg.device), "suite": cfg.suite, "budget": cfg.budget}
    protocol = suite.protocol(cfg)
    resources = suite.prepare(cfg, splits)
    out_dir = Path(cfg.output_dir) / cfg.suite
    records: list[dict[str, Any]] = []
    with tracker.parent(f"{cfg.suite}-{cfg.budget}", flatten(to_dict(cfg)), tags, to_yaml(cfg)):
        for model_name in cfg.models:
            for seed in cfg.seeds:
                run_name = f"{model_name}-{cfg.dataset}-s{seed}"
                child_params = {"model": model_name, "dataset": cfg.dataset, "seed": seed}
                with tracker.child(run_name, child_params, {**tags, "model": model_name}) as child:
                    trained = obtain_model(cfg, model_name, seed, splits, protocol)
                    ctx = Context(
                        model=trained.model.eval(), model_name=model_name, splits=splits, params=cfg.params,
                        device=cfg.device, batch_size=cfg.train.eval_batch_size, seed=seed, protocol=protocol,
                        resources=resources,
                    )
                    rows = [
                        {"suite": cfg.suite, "model": model_name, "dataset": cfg.dataset, "seed": seed, **r}
                        for r in suite.measure(ctx)
                    ]
                    child.log_params({
                        "checkpoint.key": trained.key, "checkpoint.path": str(trained.path),
                        "checkpoint.cached": trained.cached, "checkpoint.best_epoch": trained.meta["best_epoch"],
                        **{f"model_args.{k}": v for k, v in trained.meta["identity"]["model_args"].items()},
                    })
                    child.log_metrics({"best_val_accuracy": 100.0 * trained.meta["best_val_accuracy"]})
                    child.log_records(rows, suite_cls.sweep_columns)
                    records += rows
                    figure_paths = [
                        path
                        for name, fig in suite.figures(ctx).items()
                        for path in save_figure(fig, out_dir / "figures" / f"{name}-{model_name}-s{seed}")
                    ]
                    child.log_artifacts(figure_paths)
        paths = report.write_outputs(out_dir, records, suite_cls, notes=suite.notes(records, cfg.params))
        config_path = out_dir / "config.yaml"
        write_text(config_path, to_yaml(cfg))
        tracker.log_artifacts([*paths.values(), config_path])
    return SuiteResult(records, {**paths, "config.yaml": config_path}, paths["table.md"].read_text(), tracker.parent_id)
