"""Composes defaults < budget YAML < suite YAML < command-line key=value overrides, and validates them.

Torch-free: every check runs before a heavy library loads; only device=auto/cuda imports torch, last."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from platformdirs import user_cache_dir
from yaml import YAMLError

from capsbench.config_shape import check_shapes, expected_at
from capsbench.errors import CapsbenchError
from capsbench.launchers.settings import RaySettings, SlurmSettings
from capsbench.registry import close_matches

BUDGETS = ("smoke", "quick", "paper")
PER_MODEL = ("model_args", "model_train")  # free-form mappings keyed by model name


@dataclass
class DataConfig:
    root: str | None = None  # default: $CAPSBENCH_DATA, else a user cache directory
    download: bool = True  # fetch through torchvision when the files are missing
    val_size: int = 5000  # held out from the training set, fixed seed; used for model selection
    train_subset: int | None = None  # first n training images (after the split); None = all
    val_subset: int | None = None
    test_subset: int | None = None
    max_shift: int = 2  # random translation in pixels during training (Sabour et al.)


@dataclass
class TrainConfig:
    epochs: int = 10
    batch_size: int = 128
    lr: float = 1e-3
    lr_decay: float = 0.96  # factor applied to lr after every epoch, or only at lr_milestones when given
    optimizer: str = "adam"  # adam | sgd (with momentum)
    momentum: float = 0.9  # sgd only
    weight_decay: float = 0.0  # L2 penalty on every parameter, either optimiser
    lr_milestones: list[int] | None = None  # epochs after which lr is multiplied by lr_decay (a step schedule)
    warmup_epochs: int = 0  # lr rises linearly from lr / steps to lr over the first warmup_epochs' batches
    eval_batch_size: int = 500
    target_val_accuracy: float | None = None  # %: stop after the first epoch whose validation accuracy reaches it
    compile: bool = False  # torch.compile the forward + loss (changes rounding: part of the checkpoint key)
    precision: str = "fp32"  # or bf16: autocast on CUDA only, softmax and squash kept fp32 (part of the checkpoint key)
    # Adversarial training (Madry et al.): null, or pgd to train on L-inf PGD examples of every batch
    adversarial: str | None = None
    adv_eps: float = 0.3  # L-inf radius on [0, 1] pixels (Madry et al.'s MNIST value)
    adv_steps: int = 40  # PGD steps per batch, from a uniform random start
    adv_step_size: float = 0.01  # per step
    adv_ramp_epochs: int = 0  # eps and step size rise linearly from 1/steps of their value over these epochs' batches
    # Training augmentation: null, or affine (suite=affine: random rotation, shear, scale, then placement on the canvas)
    augment: str | None = None
    affine_rotation_deg: float = 20.0  # uniform in [-r, r] degrees (defaults: affNIST's test ranges)
    affine_shear: float = 0.2  # horizontal shear uniform in [-s, s]
    affine_scale: list[float] = field(default_factory=lambda: [0.8, 1.2])  # x and y scale, each uniform in [lo, hi]


@dataclass
class TrackingConfig:
    uri: str | None = None  # default: $MLFLOW_TRACKING_URI, else sqlite:///<output_dir>/mlflow.db
    experiment: str = "capsbench"
    enabled: bool = True


@dataclass
class RunConfig:
    suite: str | None = None
    budget: str = "quick"
    seeds: list[int] = field(default_factory=lambda: [0])
    models: list[str] = field(default_factory=lambda: ["capsnet", "cnn_sabour", "cnn_9x9"])
    dataset: str = "mnist"
    device: str = "auto"  # auto: cuda if present, else cpu
    output_dir: str = "results"
    cache_dir: str | None = None  # checkpoint cache; default: $CAPSBENCH_CACHE, else <output_dir>/checkpoints
    retrain: bool = False  # ignore cached checkpoints and train again
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    # per model name: constructor overrides, and train overrides (its paper's lr, ...)
    model_args: dict[str, dict[str, Any]] = field(default_factory=dict, metadata={"keys": "model"})
    model_train: dict[str, dict[str, Any]] = field(default_factory=dict, metadata={"keys": "model"})
    threads: int | None = None  # torch intra-op threads per unit; None: torch's default capped by the CPUs allowed
    remeasure: bool = False  # measure every unit again, even those a previous run of the same command finished
    launcher: str = "local"  # local (in this process), ray, or slurm (submitit)
    ray: RaySettings = field(default_factory=RaySettings)
    slurm: SlurmSettings = field(default_factory=SlurmSettings)
    params: Any = None  # the suite's own parameters (its Params dataclass)


@dataclass
class ReportConfig:
    """`capsbench report` settings: which tracked runs to tabulate and where to write the tables."""

    suite: str | None = None  # default: every suite that has runs
    models: list[str] | None = None
    dataset: str | None = None
    budget: str | None = None  # required when the selected runs span several budgets
    version: str | None = None  # capsbench version; required when the runs span several
    since: str | None = None  # ISO date or date-time (UTC unless an offset is given), on the run's start
    until: str | None = None
    output_dir: str = "results"  # tables go to <output_dir>/report/
    baselines_dir: str | None = None  # default: the shipped baselines/
    tracking: TrackingConfig = field(default_factory=TrackingConfig)


def config_dir() -> Path:
    """The directory holding `suites/` and `budgets/`: the repository root, or the installed wheel's copy."""
    repo = Path(__file__).resolve().parent.parent
    if (repo / "suites").is_dir():
        return repo
    return Path(str(resources.files("capsbench") / "_data"))


def parse_overrides(overrides: list[str]) -> dict[str, str]:
    """'key=value' strings -> {key: raw value}; anything else is an error."""
    parsed: dict[str, str] = {}
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CapsbenchError(f"expected key=value, got {item!r} (for example: suite=accuracy seeds=[0,1])")
        parsed[key.strip()] = value
    return parsed


def _cli_layer(raw: dict[str, str]) -> dict[str, Any]:
    """The overrides as a nested mapping, values parsed as YAML (lists [a,b], numbers, null, true/false)."""
    layer: dict[str, Any] = {}
    for key, text in raw.items():
        try:
            value = OmegaConf.to_container(OmegaConf.from_dotlist([f"value={text}"]))["value"]  # type: ignore[index]
        except YAMLError as exc:
            problem = str(exc).splitlines()[0]
            raise CapsbenchError(f"cannot read {key}={text}: {problem} (lists are written [a,b]; quote odd values)") from None
        *parents, leaf = key.split(".")
        node = layer
        for depth, part in enumerate(parents):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                earlier = ".".join(parents[: depth + 1])
                raise CapsbenchError(f"{key}={text} sets a sub-key of {earlier}, which is also given a value; give one of them")
        if leaf in node:
            raise CapsbenchError(f"{key}={text} replaces sub-keys given elsewhere on the command line; give one of them")
        node[leaf] = value
    return layer


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
            return  # free-form mapping (model_args, model_train): checked per model in config_checks
        if not isinstance(node, DictConfig) or part not in node:
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
        raise CapsbenchError(f"bad value in {source}: {_describe(exc, schema)}") from None


def _describe(exc: OmegaConfBaseException, schema: DictConfig | None = None) -> str:
    key = getattr(exc, "full_key", None)
    msg = str(exc).splitlines()[0]
    expected = expected_at(schema, key) if key and schema is not None else None
    return f"{key}: {msg}" + (f" ({expected})" if expected else "") if key else msg


def _read_yaml(path: Path) -> dict[str, Any]:
    loaded = OmegaConf.to_container(OmegaConf.load(path))
    if not isinstance(loaded, dict):
        raise CapsbenchError(f"{path} must hold a mapping of config keys")
    return loaded


def compose(overrides: list[str], *, require_suite: bool = True, resolve_device: bool = True) -> DictConfig:
    """Build the validated run config from command-line overrides (see module docstring for the order).

    Every check runs without torch; with resolve_device, device=auto is then resolved and device=cuda checked,
    which imports torch. `show-config` leaves device=auto as it is.
    """
    from capsbench.config_checks import check_train_precision, validate
    from capsbench.suites import CATALOG

    raw = parse_overrides(overrides)
    cli_layer = _cli_layer(raw)
    suite_name = raw.get("suite")
    budget = raw.get("budget", RunConfig.budget)
    if budget not in BUDGETS:
        raise CapsbenchError(f"unknown budget {budget!r}: {close_matches(budget, list(BUDGETS))}")
    if require_suite and not suite_name:
        raise CapsbenchError(f"which suite? add suite=NAME, one of: {', '.join(CATALOG.names())}")
    suite = CATALOG.get(suite_name) if suite_name else None
    cfg = _schema(suite.params if suite else None)

    root = config_dir()
    cfg = _merge(cfg, _read_yaml(root / "suites" / "budgets" / f"{budget}.yaml"), f"budget {budget!r}")
    if suite:
        suite_yaml = _read_yaml(root / "suites" / f"{suite_name}.yaml")
        per_budget = suite_yaml.pop("budgets", {}) or {}
        cfg = _merge(cfg, suite_yaml, f"suites/{suite_name}.yaml")
        cfg = _merge(cfg, per_budget.get(budget, {}) or {}, f"suites/{suite_name}.yaml budgets.{budget}")
    cfg = _merge(cfg, cli_layer, "the command line")
    try:
        explicit_root = _resolve_defaults(cfg)
        validate(cfg, explicit_root=explicit_root, model_trains=_model_trains(cfg))
        check = getattr(suite.params, "validate", None) if suite else None
        if check is not None:
            check(cfg)
    except OmegaConfBaseException as exc:  # e.g. an unresolvable ${...} interpolation in a value
        raise CapsbenchError(f"bad value: {_describe(exc)}") from None
    if resolve_device:
        _resolve_device(cfg)
        check_train_precision(cfg.train, cfg.device)  # bf16 with device=auto, now that auto became cuda or cpu
        for name in cfg.model_train:
            check_train_precision(for_model(cfg, name).train, cfg.device, f"model_train.{name}")
    return cfg


def compose_suites(overrides: list[str]) -> list[DictConfig]:
    """One composed config per suite named by suite=NAME or suite=[A,B,...]; every other override applies to each."""
    value = parse_overrides(overrides).get("suite", "")
    if not value.startswith("["):
        return [compose(overrides)]
    names = [n.strip() for n in value.strip("[]").split(",") if n.strip()]
    if not names or len(set(names)) != len(names):
        raise CapsbenchError(f"suite=[...] must name distinct suites, e.g. suite=[accuracy,robustness], got suite={value}")
    rest = [o for o in overrides if not o.startswith("suite=")]
    return [compose([*rest, f"suite={name}"]) for name in names]


def compose_report(overrides: list[str]) -> DictConfig:
    """The validated `capsbench report` config: ReportConfig defaults < command-line key=value overrides."""
    raw = parse_overrides(overrides)
    cfg = _merge(OmegaConf.structured(ReportConfig), _cli_layer(raw), "the command line")
    if cfg.budget is not None and cfg.budget not in BUDGETS:
        raise CapsbenchError(f"unknown budget {cfg.budget!r}: {close_matches(cfg.budget, list(BUDGETS))}")
    out = Path(cfg.output_dir).expanduser().resolve()
    cfg.output_dir = str(out)
    if cfg.tracking.uri is None:
        cfg.tracking.uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{out / 'mlflow.db'}"
    return cfg


def default_data_root() -> Path:
    """Where datasets go when neither data.root nor CAPSBENCH_DATA is given (created for downloads only)."""
    return Path(user_cache_dir("capsbench")) / "datasets"


def _resolve_defaults(cfg: DictConfig) -> str | None:
    """Fill in the derived defaults; returns where data.root came from ("data.root" or "CAPSBENCH_DATA"), None
    when it is the default download directory."""
    out = Path(cfg.output_dir).expanduser().resolve()
    cfg.output_dir = str(out)
    explicit = "data.root" if cfg.data.root is not None else "CAPSBENCH_DATA" if os.environ.get("CAPSBENCH_DATA") else None
    if cfg.data.root is None:
        cfg.data.root = os.environ.get("CAPSBENCH_DATA") or str(default_data_root())
    cfg.data.root = str(Path(cfg.data.root).expanduser().resolve())
    if cfg.cache_dir is None:
        cfg.cache_dir = os.environ.get("CAPSBENCH_CACHE") or str(out / "checkpoints")
    if cfg.tracking.uri is None:
        cfg.tracking.uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{out / 'mlflow.db'}"
    return explicit


def _resolve_device(cfg: DictConfig) -> None:
    """device=auto -> cuda or cpu, and device=cuda only with a CUDA device: the one check that imports torch."""
    if cfg.device != "auto" and not cfg.device.startswith("cuda"):
        return
    import torch

    if cfg.device == "auto":
        cfg.device = "cuda" if torch.cuda.is_available() else "cpu"
    elif not torch.cuda.is_available():
        raise CapsbenchError(f"device={cfg.device} but no CUDA device is available; use device=cpu or auto")


def _model_trains(cfg: DictConfig) -> dict[str, DictConfig]:
    """The train settings of every model named under model_train (an unknown model name is an error)."""
    from capsbench.models import MODELS

    for name in cfg.model_train:
        MODELS.get(name)
    return {name: for_model(cfg, name).train for name in cfg.model_train}


def for_model(cfg: DictConfig, name: str) -> DictConfig:
    """The run config with model_train.<name> merged into train: the settings model `name` is trained with."""
    overrides = cfg.model_train.get(name)
    if not overrides:
        return cfg
    if not isinstance(overrides, DictConfig):
        raise CapsbenchError(f"model_train.{name} must map train keys to values, e.g. model_train.{name}.lr=0.01")
    valid = [f.name for f in dataclasses.fields(TrainConfig)]
    for key in overrides:
        if key not in valid:
            raise CapsbenchError(f"unknown key model_train.{name}.{key}: {close_matches(str(key), valid)}")
    try:
        return OmegaConf.merge(cfg, {"train": overrides})  # type: ignore[return-value]
    except OmegaConfBaseException as exc:
        raise CapsbenchError(f"bad value in model_train.{name}: {_describe(exc)}") from None


def to_dict(cfg: DictConfig) -> dict[str, Any]:
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def to_yaml(cfg: DictConfig) -> str:
    return OmegaConf.to_yaml(cfg)
