"""Runs a composed suite config: plan (models x seeds), obtain checkpoints, measure, track, report."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from capsbench import report
from capsbench.atomic import write_text
from capsbench.baselines import load_baselines, matching
from capsbench.config import to_dict, to_yaml
from capsbench.data import Splits, load_splits
from capsbench.models import create_model
from capsbench.plots import save_figure
from capsbench.protocols import TrainingProtocol
from capsbench.suites import SUITES, Context, Suite, Variant
from capsbench.tracking import ChildRun, Tracker, environment_tags, flatten
from capsbench.training import model_config, obtain_model

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
    suite.validate(cfg)
    splits = load_data(cfg)
    torch.set_float32_matmul_precision("highest")  # TF32 off: numbers must not depend on the GPU generation
    tracker = make_tracker(cfg)
    tags = {**environment_tags(cfg.device), "suite": cfg.suite, "budget": cfg.budget}
    protocol = suite.protocol(cfg)
    resources = suite.prepare(cfg, splits)
    out_dir = Path(cfg.output_dir) / cfg.suite
    records: list[dict[str, Any]] = []
    built_with: dict[str, set[tuple]] = {}  # model -> the constructor arguments of its variants
    with tracker.parent(f"{cfg.suite}-{cfg.budget}", flatten(to_dict(cfg)), tags, to_yaml(cfg)):
        for model_name in cfg.models:
            for variant in suite.variants(cfg, model_name):
                vcfg = with_model_args(cfg, model_name, variant)
                suffix = "".join(f"-{k}{v}" for k, v in variant.columns.items())
                for seed in cfg.seeds:
                    run_name = f"{model_name}{suffix}-{cfg.dataset}-s{seed}"
                    child_params = {"model": model_name, "dataset": cfg.dataset, "seed": seed, **variant.columns}
                    with tracker.child(run_name, child_params, {**tags, "model": model_name}) as child:
                        model, model_args, undertrained = _model(suite, vcfg, model_name, seed, splits, protocol, child)
                        built_with.setdefault(model_name, set()).add(tuple(sorted((k, str(v)) for k, v in model_args.items())))
                        ctx = Context(
                            model=model.eval(), model_name=model_name, splits=splits, params=cfg.params,
                            device=cfg.device, batch_size=cfg.train.eval_batch_size, seed=seed, protocol=protocol,
                            resources=resources, model_args=model_args,
                        )
                        flag = {} if undertrained is None else {"undertrained": undertrained}
                        rows = [
                            {"suite": cfg.suite, "model": model_name, "dataset": cfg.dataset, "seed": seed,
                             **variant.columns, **r, **flag}
                            for r in suite.measure(ctx)
                        ]
                        child.log_records(rows, suite_cls.sweep_columns)
                        records += rows
                        figure_paths = [
                            path
                            for name, fig in suite.figures(ctx).items()
                            for path in save_figure(fig, out_dir / "figures" / f"{name}-{model_name}{suffix}-s{seed}")
                        ]
                        child.log_artifacts(figure_paths)
        paths = report.write_outputs(
            out_dir, records, suite_cls, published_beside(cfg.suite, built_with), notes=suite.notes(records, cfg.params)
        )
        config_path = out_dir / "config.yaml"
        write_text(config_path, to_yaml(cfg))
        tracker.log_artifacts([*paths.values(), config_path])
    return SuiteResult(records, {**paths, "config.yaml": config_path}, paths["table.md"].read_text(), tracker.parent_id)


def published_beside(suite: str, built_with: dict[str, set[tuple]]) -> list[dict[str, Any]]:
    """Published numbers (baselines/) for the models measured, matched on their constructor arguments.

    A model measured in several variants (e.g. routing iterations) gets none here: its rows differ in the
    arguments a published number is tied to; `capsbench report` handles that per invocation.
    """
    single = {model: dict(next(iter(args))) for model, args in built_with.items() if len(args) == 1}
    return matching(load_baselines(), suite=suite, model_args=single)


def with_model_args(cfg: DictConfig, model_name: str, variant: Variant) -> DictConfig:
    """The config with the variant's constructor overrides merged into model_args.<model_name>."""
    if not variant.model_args:
        return cfg
    return OmegaConf.merge(cfg, {"model_args": {model_name: dict(variant.model_args)}})  # type: ignore[return-value]


def _model(
    suite: Suite, cfg: DictConfig, name: str, seed: int, splits: Splits, protocol: TrainingProtocol, child: ChildRun
) -> tuple[torch.nn.Module, dict[str, Any], bool | None]:
    """A trained model from the checkpoint cache (or trained now), or a fresh seeded one for suites that need no weights;
    and whether the trained model is undertrained (None: not trained)."""
    if not suite.needs_training:
        args = model_config(cfg, name, splits, protocol)
        torch.manual_seed(seed)
        child.log_params({f"model_args.{k}": v for k, v in args.items()})
        return create_model(name, **args).to(cfg.device), args, None
    trained = obtain_model(cfg, name, seed, splits, protocol)
    val, floor = 100.0 * trained.meta["best_val_accuracy"], protocol.min_validation_score(splits.spec)
    if val < floor:
        log.warning("%s seed %d is undertrained: best validation score %.2f %% is below the floor of %.1f %% for %s; "
                    "it is flagged in the records and tables and never counted as best", name, seed, val, floor, splits.name)
    child.log_params({
        "checkpoint.key": trained.key, "checkpoint.path": str(trained.path),
        "checkpoint.cached": trained.cached, "checkpoint.best_epoch": trained.meta["best_epoch"],
        **{f"model_args.{k}": v for k, v in trained.meta["identity"]["model_args"].items()},
    })
    child.log_metrics({"best_val_accuracy": val})
    return trained.model, trained.meta["identity"]["model_args"], val < floor
