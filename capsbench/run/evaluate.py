"""`capsbench.evaluate(...)`, the notebook API: one suite on one model (a name, an alias, a "module:Class" path or a
model instance), through the same config checks, units, unit store, checkpoint cache, MLflow logging and tables as
`capsbench run`, returned as pandas objects and file paths."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from torch import nn

from capsbench.config.compose import compose
from capsbench.config.request import settings_request
from capsbench.errors import CapsbenchError
from capsbench.models.external import BUILT_INS, register_instance
from capsbench.models.weights import state_sha256
from capsbench.reporting.csv import table_frame
from capsbench.run.driver import run_suite
from capsbench.util.progress import shown

FIGURE_SUFFIXES = (".png", ".pdf")


@dataclass
class Evaluation:
    """What one suite measured: its tidy records, its tables by name (rows indexed by model, or attack and model;
    columns (column, field) with mean, std, seeds, ci_low, ci_high, best), the figure files, every output path, the
    Markdown tables and the MLflow parent run."""

    suite: str
    model: str
    records: pd.DataFrame
    tables: dict[str, pd.DataFrame]
    figures: list[Path]
    paths: dict[str, Path]
    markdown: str
    mlflow_run_id: str | None
    missing: list[str] = field(default_factory=list)  # units that failed, with their errors

    def _repr_markdown_(self) -> str:  # how a notebook shows it
        return self.markdown


def evaluate(
    model: str | nn.Module,
    suite: str = "robustness",
    dataset: str = "mnist",
    weights: str | Path | None = None,
    *,
    name: str | None = None,
    progress: bool = True,
    **overrides: Any,
) -> Evaluation:
    """Run `suite` on `model` and return its records, tables and figures.

    model: a built-in name, a registered alias, a "package.module:Class" path, or an nn.Module instance (measured as
        it is: its class and state dict are the model and its weights, training=external; `name` names it, by default
        its class name in lower case). An instance's unit key holds its class's source hash, the SHA-256 of its state
        dict by content and of its plain attributes (routing iterations, ...), so a changed instance is measured again.
    weights: a .pt/.pth state dict or .safetensors file for a named model (weights.<model>=PATH).
    progress: progress bars (tqdm: a widget in a notebook) for the units, training and attacks; False: none.
    overrides: any run setting, dotted (`**{"data.test_subset": 100}`) or nested (`data={"test_subset": 100}`),
        e.g. budget="smoke", seeds=[0, 1], output_dir="out", register={"mycaps": "mypkg.caps:MyCaps"}.
    """
    request = settings_request(overrides)
    if request.get("models") is not None or request.get("suite") is not None:
        raise CapsbenchError("evaluate() takes the model and the suite as its arguments, not models= or suite=")
    alias, extra = _model(model, weights, name)
    cfg = compose(request.merged({**extra, "suite": suite, "dataset": dataset, "models": [alias]}))
    if isinstance(model, nn.Module) and cfg.launcher != "local":
        raise CapsbenchError("a model instance is measured in this process: use launcher=local (the default)")
    with shown(progress):
        result = run_suite(cfg)
    paths = dict(result.paths)
    out_dir = paths["table.md"].parent
    figures = sorted({*(p for p in paths.values() if p.suffix in FIGURE_SUFFIXES),
                      *(p for p in (out_dir / "figures").glob("*") if p.suffix in FIGURE_SUFFIXES)})
    tables = {} if result.output is None else {t.name: table_frame(t) for t in result.output.tables}
    return Evaluation(suite, alias, pd.DataFrame.from_records(result.records), tables, figures, paths, result.markdown,
                      result.parent_run_id, [f"{u.spec.name}: {u.error}" for u in result.missing])


def _model(model: str | nn.Module, weights: str | Path | None, name: str | None) -> tuple[str, dict[str, Any]]:
    """The model's name in the run and the settings that bring it there (register, weights)."""
    if isinstance(model, nn.Module):
        if weights is not None:
            raise CapsbenchError("a model instance carries its weights: drop weights= (or pass the model's name)")
        alias = name or type(model).__name__.lower()
        alias = f"{alias}_own" if alias in BUILT_INS else alias
        register_instance(alias, model, state_sha256(model), _attributes_sha256(model))
        return alias, {}
    if not isinstance(model, str):
        raise CapsbenchError(f"model must be a name, a 'package.module:Class' path or an nn.Module, got {type(model)}")
    extra: dict[str, Any] = {}
    alias = model
    if ":" in model:
        alias = name or model.rpartition(":")[2].lower()
        alias = f"{alias}_own" if alias in BUILT_INS and name is None else alias
        extra["register"] = {alias: model}
    if weights is not None:
        extra["weights"] = {alias: str(weights)}
    return alias, extra


def _attributes_sha256(model: nn.Module) -> str:
    """A SHA-256 of the plain attributes (numbers, strings, booleans, tuples of them) of every submodule: settings
    such as routing iterations that shape outputs without being weights."""
    plain = (int, float, str, bool, type(None))
    attributes = {
        name or "<root>": {k: v for k, v in sorted(vars(module).items())
                           if not k.startswith("_") and k != "training"
                           and (isinstance(v, plain) or isinstance(v, tuple) and all(isinstance(e, plain) for e in v))}
        for name, module in model.named_modules()
    }
    return hashlib.sha256(json.dumps(attributes, sort_keys=True, default=str).encode()).hexdigest()
