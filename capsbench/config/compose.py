"""Composes defaults < budget YAML < suite YAML < the user's config file < the command line (a Request, parsed once at
the door), and validates them.

Torch-free: every check runs before a heavy library loads; only device=auto/cuda imports torch, last."""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from capsbench.config.checks import check_one_process_per_gpu, check_train_precision, validate
from capsbench.config.external import check_external, register_external
from capsbench.config.per_model import model_trains
from capsbench.config.request import Request
from capsbench.config.schema import BUDGETS, PER_MODEL, ReportConfig, RunConfig
from capsbench.config.shape import check_shapes, describe_error
from capsbench.data.files import default_data_root
from capsbench.errors import CapsbenchError
from capsbench.suites import CATALOG
from capsbench.util.paths import resolved
from capsbench.util.precision import check_device_precision
from capsbench.util.registry import close_matches
from capsbench.util.shipped import shipped_dir
from capsbench.util.uris import sqlite_uri


def _schema(params_cls: type | None) -> DictConfig:
    if params_cls is None:
        return OmegaConf.structured(RunConfig)
    typed = dataclasses.make_dataclass(
        "SuiteRunConfig", [("params", params_cls, field(default_factory=params_cls))], bases=(RunConfig,)
    )
    return OmegaConf.structured(typed)


def _check_key(schema: DictConfig, dotted: str, source: str) -> None:
    node: Any = schema
    parts = dotted.split(".")
    for depth, part in enumerate(parts):
        path = ".".join(parts[:depth])
        if isinstance(node, DictConfig) and OmegaConf.get_type(node) is dict:
            return  # free-form mapping (model_args, model_train): checked per model in capsbench.config.checks
        if not isinstance(node, DictConfig) or part not in node:
            moved = getattr(OmegaConf.get_type(node), "MOVED", {}) if isinstance(node, DictConfig) else {}
            if part in moved:  # a setting that lives elsewhere now: say where
                raise CapsbenchError(f"{dotted!r} ({source}) is now {path}.{moved[part]}")
            valid = list(node.keys()) if isinstance(node, DictConfig) else []
            where = f" under {path!r}" if path else ""
            hint = close_matches(part, [str(k) for k in valid]) if valid else f"{path!r} takes a value, not sub-keys"
            raise CapsbenchError(f"unknown config key {dotted!r} in {source}{where}: {hint}")
        node = node[part]


def _flatten_keys(cfg: Any, prefix: str = "") -> list[str]:
    if not isinstance(cfg, dict):
        return [prefix]
    keys: list[str] = []
    for k, v in cfg.items():
        dotted = f"{prefix}.{k}" if prefix else str(k)
        keys += _flatten_keys(v, dotted) if isinstance(v, dict) and k not in PER_MODEL else [dotted]
    return keys


def _merge(schema: DictConfig, layer: dict[str, Any], source: str) -> DictConfig:
    for key in _flatten_keys(layer):
        _check_key(schema, key, source)
    check_shapes(schema, layer, source)
    try:
        return OmegaConf.merge(schema, OmegaConf.create(layer))  # type: ignore[return-value]
    except OmegaConfBaseException as exc:
        raise CapsbenchError(f"bad value in {source}: {describe_error(exc, schema)}") from None


def _read_yaml(path: Path) -> dict[str, Any]:
    loaded = OmegaConf.to_container(OmegaConf.load(path))
    if not isinstance(loaded, dict):
        raise CapsbenchError(f"{path} must hold a mapping of config keys")
    return loaded


def compose(request: Request, *, require_suite: bool = True, resolve_device: bool = True) -> DictConfig:
    """Build the validated run config of `request` (see module docstring for the order).

    Every check runs without torch; with resolve_device, device=auto is then resolved and device=cuda checked,
    which imports torch. `show-config` leaves device=auto as it is.
    """
    user_yaml = dict(request.file)
    if "suite" in request.line:
        user_yaml.pop("suite", None)  # the command line names the suite (compose_suites: one of the file's list)
    suite_name = request.get("suite")
    if suite_name is not None and not isinstance(suite_name, str):
        raise CapsbenchError(f"suite= names one suite here, got {suite_name!r}; run the suites one by one")
    budget = request.get("budget", RunConfig.budget)
    if budget not in BUDGETS:
        raise CapsbenchError(f"unknown budget {budget!r}: {close_matches(str(budget), list(BUDGETS))}")
    if require_suite and not suite_name:
        raise CapsbenchError(f"which suite? add suite=NAME, one of: {', '.join(CATALOG.names())}")
    suite = CATALOG.get(suite_name) if suite_name else None
    cfg = _schema(suite.params if suite else None)

    cfg = _shipped_layers(cfg, suite_name, budget)
    cfg = _merge(cfg, user_yaml, request.file_source)
    cfg = _merge(cfg, request.line, "the command line")
    try:
        explicit_root = _resolve_defaults(cfg)
        register_external(cfg)  # aliases and entry points, before any model name is checked
        trains = model_trains(cfg)
        validate(cfg, explicit_root=explicit_root, model_trains=trains)
        check = getattr(suite.params, "validate", None) if suite else None
        if check is not None:
            check(cfg)
        check_external(cfg)
    except OmegaConfBaseException as exc:  # e.g. an unresolvable ${...} interpolation in a value
        raise CapsbenchError(f"bad value: {describe_error(exc)}") from None
    if resolve_device:
        settle_device(cfg)
    return cfg


def settle_device(cfg: DictConfig) -> None:
    """Resolve device=auto to cuda or cpu and check device=cuda and bf16 against it: the one step of composing that
    imports torch, so the CLI runs it after every torch-free check (compose(..., resolve_device=False))."""
    _resolve_device(cfg)  # bf16 was let through for device=auto: check it again, now that auto is cuda or cpu
    check_one_process_per_gpu(cfg)  # likewise the launchers: auto may have become cuda
    for name, train in [("train", cfg.train), *((f"model_train.{n}", t) for n, t in model_trains(cfg).items())]:
        check_train_precision(train, cfg.device, name)
    for key in ("precision", "attack_precision"):
        if cfg.params is not None and key in cfg.params:
            check_device_precision(cfg.params[key], cfg.device, f"params.{key}")


def compose_suites(request: Request, *, resolve_device: bool = True) -> list[DictConfig]:
    """One composed config per suite named by suite=NAME or suite=[A,B,...]; every other setting applies to each."""
    value = request.get("suite")
    if not isinstance(value, list):
        return [compose(request, resolve_device=resolve_device)]
    names = [str(n).strip() for n in value if str(n).strip()]
    if not names or len(set(names)) != len(names):
        raise CapsbenchError(
            f"suite=[...] must name distinct suites, e.g. suite=[accuracy,robustness], got suite={value}"
        )
    return [compose(request.merged({"suite": name}), resolve_device=resolve_device) for name in names]


def compose_report(request: Request) -> DictConfig:
    """The validated `capsbench report` config: ReportConfig defaults < the command line."""
    if request.file_source:
        raise CapsbenchError("`capsbench report` takes its settings on the command line, not config=")
    cfg = _merge(OmegaConf.structured(ReportConfig), request.line, "the command line")
    if cfg.budget is not None and cfg.budget not in BUDGETS:
        raise CapsbenchError(f"unknown budget {cfg.budget!r}: {close_matches(cfg.budget, list(BUDGETS))}")
    if cfg.suite not in (None, "claims"):  # suite=claims: every suite, and the claims table
        CATALOG.get(cfg.suite)  # an unknown name fails here, before the report's libraries load, with close matches
    out = resolved(cfg.output_dir, "output_dir")
    cfg.output_dir = str(out)
    if cfg.tracking.uri is None:
        cfg.tracking.uri = os.environ.get("MLFLOW_TRACKING_URI") or sqlite_uri(out / "mlflow.db")
    return cfg


def _resolve_defaults(cfg: DictConfig) -> str | None:
    """Fill in the derived defaults; returns where data.root came from ("data.root" or "CAPSBENCH_DATA"), None
    when it is the default download directory."""
    out = resolved(cfg.output_dir, "output_dir")
    cfg.output_dir = str(out)
    explicit = (
        "data.root" if cfg.data.root is not None else "CAPSBENCH_DATA" if os.environ.get("CAPSBENCH_DATA") else None
    )
    if cfg.data.root is None:
        cfg.data.root = os.environ.get("CAPSBENCH_DATA") or str(default_data_root())
    cfg.data.root = str(resolved(cfg.data.root, "data.root"))
    if cfg.cache_dir is None:
        cfg.cache_dir = os.environ.get("CAPSBENCH_CACHE") or str(out / "checkpoints")
    cfg.cache_dir = str(resolved(cfg.cache_dir, "cache_dir"))
    if cfg.tracking.uri is None:
        cfg.tracking.uri = os.environ.get("MLFLOW_TRACKING_URI") or sqlite_uri(out / "mlflow.db")
    return explicit


@functools.cache
def shipped_defaults(suite: str, budget: str) -> DictConfig:
    """What capsbench ships for `suite` at `budget` (the schema's defaults < the budget's YAML < the suite's, its
    budget's block), before any user setting; read-only, unvalidated."""
    cfg = _shipped_layers(_schema(CATALOG.get(suite).params), suite, budget)
    OmegaConf.set_readonly(cfg, True)
    return cfg


def _shipped_layers(schema: DictConfig, suite: str | None, budget: str) -> DictConfig:
    """`schema` < the budget's YAML < the suite's (when there is one) < its block for the budget."""
    root = shipped_dir()
    cfg = _merge(schema, _read_yaml(root / "suites" / "budgets" / f"{budget}.yaml"), f"budget {budget!r}")
    if suite:
        suite_yaml = _read_yaml(root / "suites" / f"{suite}.yaml")
        per_budget = suite_yaml.pop("budgets", {}) or {}
        cfg = _merge(cfg, suite_yaml, f"suites/{suite}.yaml")
        cfg = _merge(cfg, per_budget.get(budget, {}) or {}, f"suites/{suite}.yaml budgets.{budget}")
    return cfg


def _resolve_device(cfg: DictConfig) -> None:
    """device=auto -> cuda or cpu; device=cuda[:N] and mps only where this machine has that device: the one check
    that imports torch."""
    if cfg.device == "cpu":
        return
    import torch  # here, last: every other check runs before torch loads

    if cfg.device == "auto":
        cfg.device = "cuda" if torch.cuda.is_available() else "cpu"
    elif cfg.device == "mps":
        if not torch.backends.mps.is_available():
            raise CapsbenchError("device=mps but no MPS device is available (Apple silicon, macOS 12.3+); "
                                 "use device=cpu or auto")
    elif not torch.cuda.is_available():
        raise CapsbenchError(f"device={cfg.device} but no CUDA device is available; use device=cpu or auto")
    elif ":" in cfg.device and int(cfg.device.split(":")[1]) >= (count := torch.cuda.device_count()):
        raise CapsbenchError(f"device={cfg.device} but this machine has {count} CUDA device(s), cuda:0 to "
                             f"cuda:{count - 1}; use one of them, or device=cuda")


def to_dict(cfg: DictConfig) -> dict[str, Any]:
    """The config as plain containers, interpolations resolved."""
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def to_yaml(cfg: DictConfig) -> str:
    """The config as YAML text."""
    return OmegaConf.to_yaml(cfg)
