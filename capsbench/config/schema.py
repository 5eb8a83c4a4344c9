"""The typed schema of a run and of a report: every key a user may set, its type and its default."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from capsbench.config.launch import RaySettings, SlurmSettings

BUDGETS = ("smoke", "quick", "paper")
PER_MODEL = ("model_args", "model_train")  # free-form mappings keyed by model name


@dataclass
class DataConfig:
    root: str | None = None  # default: $CAPSBENCH_DATA, else a user cache directory
    download: bool = True  # fetch through torchvision when the files are missing
    val_size: int = 5000  # held out from the training set, fixed seed; used for model selection
    train_subset: int | None = None  # first n training images (after the split); None = all
    val_subset: int | None = None
    test_subset: int | None = None  # n test images, drawn as test_subset_draw says; None = all
    test_subset_draw: str = "stratified"  # stratified: seeded, class-stratified random; head: the first n (old tables)
    test_subset_seed: int = 0  # the stratified draw's seed: the same images for every model, training seed and run
    max_shift: int = 2  # random translation in pixels during training (Sabour et al.)


@dataclass
class TrainConfig:
    epochs: int = 10
    batch_size: int = 128
    lr: float = 1e-3
    lr_decay: float = 0.96  # factor applied to lr after every epoch, or only at lr_milestones when given
    optimizer: str = "adam"  # adam | sgd (with momentum)
    momentum: float = 0.9  # sgd only
    weight_decay: float = 0.0  # L2 penalty on every parameter, either optimizer
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
    output_dir: str = "outputs"  # runs/<date>/<time>/ per run, <suite>/ the latest; not results/ (committed tables)
    cache_dir: str | None = None  # checkpoint cache; default: $CAPSBENCH_CACHE, else <output_dir>/checkpoints
    retrain: bool = False  # ignore cached checkpoints and train again
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    # per model name: constructor overrides, and train overrides (its paper's lr, ...)
    model_args: dict[str, dict[str, Any]] = field(default_factory=dict, metadata={"keys": "model"})
    model_train: dict[str, dict[str, Any]] = field(default_factory=dict, metadata={"keys": "model"})
    # external models: alias -> "package.module:ClassOrFunction"; weights trained elsewhere: model -> file
    register: dict[str, str] = field(default_factory=dict, metadata={"keys": "alias"})
    weights: dict[str, str] = field(default_factory=dict, metadata={"keys": "model"})
    threads: int | None = None  # torch intra-op threads per unit; None: torch's default capped by the CPUs allowed
    remeasure: bool = False  # measure every unit again, even those a previous run of the same command finished
    launcher: str = "local"  # local (in this process), ray, or slurm (submitit)
    ray: RaySettings = field(default_factory=RaySettings)
    slurm: SlurmSettings = field(default_factory=SlurmSettings)
    params: Any = None  # the suite's own parameters (its Params dataclass)


@dataclass
class LatexConfig:
    eps: list[float] | None = None  # the eps columns of table-narrow.tex (one column of a two-column paper)


@dataclass
class ReportConfig:
    """`capsbench report` settings: which tracked runs to tabulate and where to write the tables."""

    suite: str | None = None  # default: every suite that has runs; claims: every suite and the claims table
    models: list[str] | None = None
    dataset: str | None = None
    budget: str | None = None  # required when the selected runs span several budgets
    version: str | None = None  # capsbench version; required when the runs span several
    code: str | None = None  # code hash prefix (tag code.hash); required when the runs span several code versions
    since: str | None = None  # ISO date or date-time (UTC unless an offset is given), on the run's start
    until: str | None = None
    output_dir: str = "outputs"  # runs/<date>/<time>/report/, copied to <output_dir>/report/
    baselines_dir: str | None = None  # default: the shipped baselines/
    latest: bool = False  # per suite, only its newest run and the older ones measured alike
    claims: bool = False  # judge the published claims on the reported suites and add the claims table
    one_seed_verdicts: bool = False  # allow supported / refuted from one training seed (marked "one seed")
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    latex: LatexConfig = field(default_factory=LatexConfig)
