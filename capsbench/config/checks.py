"""Checks on a composed run config, all without torch: known names, numeric ranges of the train and data settings
(per model too), the training precision, and a data.root that exists. Each failure is one CapsbenchError naming the
valid choices or range."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from capsbench.config.launch import LAUNCHERS, require_extra
from capsbench.data import DATASETS
from capsbench.data.catalog import TEST_DRAWS
from capsbench.errors import CapsbenchError, clipped
from capsbench.models import MODELS, check_model_arguments
from capsbench.util.precision import check_train_precision
from capsbench.util.registry import close_matches

Rule = tuple[Callable[[Any], bool], str]


def _at_least(low: int) -> Rule:
    return (lambda v: v >= low, f"an integer >= {low}")


def _optional(rule: Rule, none: str) -> Rule:
    check, words = rule
    return (lambda v: v is None or check(v), f"{words}, or null {none}")


TRAIN_RULES: dict[str, Rule] = {
    "epochs": _at_least(1),
    "batch_size": _at_least(1),
    "eval_batch_size": _at_least(1),
    "lr": (lambda v: v > 0, "a number > 0"),
    "lr_decay": (lambda v: 0 < v <= 1, "a number in (0, 1] (1 = no decay)"),
    "target_val_accuracy": _optional((lambda v: 0 < v <= 100, "a percentage in (0, 100]"), "to train every epoch"),
}
DATA_RULES: dict[str, Rule] = {
    "val_size": _at_least(1),
    "train_subset": _optional(_at_least(1), "for all images"),
    "val_subset": _optional(_at_least(1), "for all images"),
    "test_subset": _optional(_at_least(1), "for all images"),
    "test_subset_draw": (lambda v: v in TEST_DRAWS, f"one of {', '.join(TEST_DRAWS)}"),
    "test_subset_seed": _at_least(0),
    "max_shift": _at_least(0),
}
DEVICES = "auto, cpu, cuda, cuda:N or mps"
OPTIMIZERS = ("adam", "sgd")
ADVERSARIAL = ("pgd",)
AUGMENTS = {"affine": ("affine",)}  # augmentation -> the suites whose training protocol applies it
SINGLE_LABEL_ONLY = ("overlap",)  # suites that train on multi-hot targets: no adversarial training (PGD needs a label)
ADV_RULES: dict[str, Rule] = {
    "adv_eps": (lambda v: 0 < v <= 1, "a number in (0, 1] (L-inf radius on [0, 1] pixels), e.g. 0.3"),
    "adv_steps": _at_least(1),
    "adv_step_size": (lambda v: v > 0, "a number > 0, e.g. 0.01"),
    "adv_ramp_epochs": _at_least(0),
}
AFFINE_RULES: dict[str, Rule] = {
    "affine_rotation_deg": (lambda v: 0 <= v <= 180, "a number of degrees in [0, 180], e.g. 20"),
    "affine_shear": (lambda v: v >= 0, "a number >= 0, e.g. 0.2"),
    "affine_scale": (
        lambda v: len(v) == 2 and 0 < v[0] <= v[1],
        "two numbers [lo, hi] with 0 < lo <= hi, e.g. [0.8,1.2]",
    ),
}


MAX_SEED = 2**32 - 1  # the largest seed every generator a unit seeds takes (torch's, NumPy's; per-epoch seeds derive)


def check_ranges(node: Any, rules: dict[str, Rule], prefix: str) -> None:
    """Each key of `node` named in `rules` must satisfy its rule."""
    for key, (ok, words) in rules.items():
        value = node[key]
        if not ok(value):
            raise CapsbenchError(f"{prefix}.{key} must be {words}, got {value}")


def _names(values: Any, what: str, example: str) -> list:
    items = list(values)
    if not items:
        raise CapsbenchError(f"{what} is empty: give at least one, for example {what}={example}")
    repeated = sorted(str(v) for v, n in Counter(items).items() if n > 1)
    if repeated:
        raise CapsbenchError(
            f"{what} lists {clipped(', '.join(repeated))} more than once; give each once, e.g. {what}={example}"
        )
    return items


def _named(root: str, source: str) -> str:
    return f"data.root={root}" if source == "data.root" else f"data.root {root} (from {source})"


def check_data_root(root: str, *, explicit: str | None, download: bool) -> None:
    """data.root must be an existing directory, unless it is the default download directory and downloads are on:
    capsbench never creates a directory the user named (a typo would otherwise collect downloads or empty folders)."""
    path = Path(root)
    if path.is_dir():
        return
    if path.exists():
        raise CapsbenchError(
            f"data.root {root} is a file, not a directory; point data.root= or CAPSBENCH_DATA at the "
            "directory that holds the dataset folders (e.g. MNIST/raw/)"
        )
    if explicit is not None:
        raise CapsbenchError(
            f"{_named(root, explicit)} does not exist; point data.root=DIR or CAPSBENCH_DATA=DIR at the "
            "directory that holds the dataset folders (e.g. MNIST/raw/), or create it first to download into it"
        )
    if not download:
        raise CapsbenchError(
            f"no datasets at {root} and data.download=false; point data.root=DIR or CAPSBENCH_DATA=DIR at the "
            "directory that holds the dataset folders (e.g. MNIST/raw/), or allow data.download=true"
        )


def validate(cfg: DictConfig, *, explicit_root: str | None, model_trains: dict[str, DictConfig]) -> None:
    """Raise a CapsbenchError for the first setting of the run config that cannot work; `model_trains` holds each
    model's train settings (train with its model_train overrides merged in)."""

    seeds = _names(cfg.seeds, "seeds", "[0,1,2]")
    if not all(0 <= s <= MAX_SEED for s in seeds):
        raise CapsbenchError(f"seeds must be integers from 0 to {MAX_SEED} (2**32 - 1), got {clipped(seeds)}")
    for name in _names(cfg.models, "models", "[capsnet]"):
        check_model_arguments(name, {})
    for name, args in cfg.model_args.items():
        check_model_arguments(name, dict(args or {}))
    check_ranges(cfg.train, TRAIN_RULES, "train")
    check_train_precision(cfg.train, cfg.device, "train")
    check_optimizer(cfg.train, "train")
    check_training_protocol(cfg.train, "train", cfg.suite)
    for name in cfg.model_train:
        MODELS.get(name)  # an unknown model name under model_train is an error
    for name, train in model_trains.items():
        where = f"model_train.{name}"
        check_ranges(train, {k: TRAIN_RULES[k] for k in (cfg.model_train.get(name) or {}) if k in TRAIN_RULES}, where)
        check_train_precision(train, cfg.device, where)
        check_optimizer(train, where)
        check_training_protocol(train, where, cfg.suite)
    check_ranges(cfg.data, DATA_RULES, "data")
    check_split_sizes(cfg.data, cfg.dataset)
    if not (cfg.device in ("auto", "cpu", "mps") or cfg.device == "cuda" or _cuda_index(cfg.device)):
        raise CapsbenchError(f"device must be one of {DEVICES}, got {cfg.device!r}")
    check_data_root(cfg.data.root, explicit=explicit_root, download=cfg.data.download)
    check_launch(cfg)


def check_split_sizes(data: DictConfig, dataset: str) -> None:
    """data.val_size leaves training images, data.test_subset is no more than the dataset's test split holds, and
    data.max_shift (where the dataset's protocol shifts) moves no image off its canvas."""
    spec = DATASETS.get(dataset)
    shifts = spec.train_crop is None and spec.train_pad == 0  # crop protocols ignore data.max_shift
    if shifts and data.max_shift >= spec.image_size:
        raise CapsbenchError(
            f"data.max_shift={data.max_shift} would shift whole {spec.image_size}x{spec.image_size} {dataset} images "
            f"off their canvas: give at most {spec.image_size - 1}, e.g. data.max_shift=2 (Sabour et al.), or 0 for "
            "no shifts"
        )
    if data.val_size >= spec.train_size:
        raise CapsbenchError(
            f"data.val_size={data.val_size} leaves no training images: {dataset}'s training split has "
            f"{spec.train_size:,}; give fewer, e.g. data.val_size=5000"
        )
    if data.test_subset is not None and data.test_subset > spec.test_size:
        raise CapsbenchError(
            f"data.test_subset={data.test_subset} is more than {dataset}'s {spec.test_size:,} test images: give at "
            f"most {spec.test_size}, or data.test_subset=null for all of them"
        )


def capped_subsets(data: DictConfig, dataset: str) -> list[str]:
    """A line for data.train_subset or data.val_subset where it asks for more images than its split holds: a subset is
    the first n images of its split, so the loaders then take the whole split."""
    spec = DATASETS.get(dataset)
    splits = {
        "train_subset": (spec.train_size - data.val_size,
                         f"training split holds after data.val_size={data.val_size} are held out"),
        "val_subset": (data.val_size, "validation split holds (data.val_size)"),
    }
    return [f"data.{key}={data[key]} is more than the {size:,} images {dataset}'s {where}: all {size:,} are used "
            f"(data.{key}=null says so)" for key, (size, where) in splits.items()
            if data[key] is not None and data[key] > size]


def check_optimizer(train: DictConfig, where: str) -> None:
    """The optimizer settings of one train section (the run's, or a model's merged with model_train.<name>)."""
    if train.optimizer not in OPTIMIZERS:
        raise CapsbenchError(
            f"{where}.optimizer={train.optimizer!r} is not an optimizer: "
            f"{close_matches(str(train.optimizer), list(OPTIMIZERS))}"
        )
    if not 0.0 <= train.momentum < 1.0:
        raise CapsbenchError(f"{where}.momentum must be in [0, 1), got {train.momentum}; e.g. 0.9")
    if train.weight_decay < 0.0:
        raise CapsbenchError(f"{where}.weight_decay must be >= 0, got {train.weight_decay}; e.g. 0.0001")
    if train.warmup_epochs < 0:
        raise CapsbenchError(f"{where}.warmup_epochs must be >= 0, got {train.warmup_epochs}; e.g. 1, or 0 for none")
    milestones = list(train.lr_milestones or [])
    if any(m < 1 for m in milestones) or milestones != sorted(set(milestones)):
        raise CapsbenchError(
            f"{where}.lr_milestones must be increasing epoch counts >= 1, got {milestones}; "
            f"e.g. [91,136], or null to decay after every epoch"
        )


def check_training_protocol(train: DictConfig, where: str, suite: str | None) -> None:
    """train.adversarial and its PGD settings, train.augment and its affine ranges, and the suites they apply to."""
    if train.adversarial is not None:
        if train.adversarial not in ADVERSARIAL:
            raise CapsbenchError(
                f"{where}.adversarial={train.adversarial!r} is not an adversarial training method: "
                f"{close_matches(str(train.adversarial), list(ADVERSARIAL))}, or null for none"
            )
        if suite in SINGLE_LABEL_ONLY:
            raise CapsbenchError(
                f"{where}.adversarial=pgd needs single-label targets, but suite={suite} trains on "
                "multi-hot ones; drop train.adversarial for this suite"
            )
        check_ranges(train, ADV_RULES, where)
    if train.augment is not None:
        if train.augment not in AUGMENTS:
            raise CapsbenchError(
                f"{where}.augment={train.augment!r} is not an augmentation: "
                f"{close_matches(str(train.augment), list(AUGMENTS))}, or null for none"
            )
        if suite is not None and suite not in AUGMENTS[train.augment]:
            raise CapsbenchError(
                f"{where}.augment={train.augment} applies to suite={' or '.join(AUGMENTS[train.augment])} "
                f"(its canvas protocol), not suite={suite}; drop it or run that suite"
            )
        check_ranges(train, AFFINE_RULES, where)


def check_launch(cfg: DictConfig) -> None:
    """threads, the launcher's name and its resource settings."""
    if cfg.threads is not None and cfg.threads < 1:
        raise CapsbenchError(f"threads must be an integer >= 1, or null for torch's default, got {cfg.threads}")
    if cfg.launcher not in LAUNCHERS:
        raise CapsbenchError(f"unknown launcher {cfg.launcher!r}: {close_matches(cfg.launcher, list(LAUNCHERS))}")
    positive = (lambda v: v >= 0, "a number >= 0")
    check_ranges(
        cfg.ray,
        {
            "cpus_per_unit": _optional(positive, "for the unit's thread count"),
            "gpus_per_unit": positive,
            "max_retries": _at_least(0),
            "num_cpus": _optional(_at_least(1), "for all CPUs"),
            "num_gpus": _optional(_at_least(0), "for all GPUs"),
        },
        "ray",
    )
    check_ranges(
        cfg.slurm,
        {
            "gpus_per_unit": _at_least(0),
            "cpus_per_unit": _at_least(1),
            "time": _at_least(1),
            "array_parallelism": _at_least(1),
            "max_retries": _at_least(0),
        },
        "slurm",
    )
    if cfg.slurm.cluster not in ("slurm", "local"):
        raise CapsbenchError(
            f"slurm.cluster must be slurm or local (local processes, for tests), got {cfg.slurm.cluster!r}"
        )
    check_one_process_per_gpu(cfg)
    require_extra(cfg.launcher)  # before anything is written, not after the MLflow runs have started


# Measured on one H200: the quick CapsNet unit takes 40 s alone in one process; 13 unit processes on the GPU finished
# nothing in 470 s (processes without MPS time-slice the device). docs/launchers.md says so.
SHARED_GPU = ("processes time-slice one GPU (13 unit processes on an H200 ran more than 10x slower than one): use "
              "launcher=local, which runs the units one after another in one process")


def check_one_process_per_gpu(cfg: DictConfig) -> None:
    """A CUDA run never starts several unit processes on one GPU: slurm.cluster=local runs its jobs as processes of
    this machine, and Ray tasks that reserve less than a whole GPU share one."""
    if not str(cfg.device).startswith("cuda"):
        return
    if cfg.launcher == "slurm" and cfg.slurm.cluster == "local" and cfg.slurm.array_parallelism > 1:
        raise CapsbenchError(f"launcher=slurm slurm.cluster=local with device=cuda would start "
                             f"{cfg.slurm.array_parallelism} unit processes on this machine's GPU(s): {SHARED_GPU} "
                             "(or slurm.array_parallelism=1)")
    if cfg.launcher == "ray" and cfg.ray.gpus_per_unit < 1:
        raise CapsbenchError(f"launcher=ray with device=cuda and ray.gpus_per_unit={cfg.ray.gpus_per_unit:g} lets "
                             f"several tasks onto one GPU: {SHARED_GPU}, or set ray.gpus_per_unit=1")


def _cuda_index(device: str) -> bool:
    prefix, _, index = device.partition(":")
    return prefix == "cuda" and index.isdigit()
