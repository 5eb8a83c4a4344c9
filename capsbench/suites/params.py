"""The typed parameters of the suites (the `params.*` config keys) and their checks, importable without torch so
that a config is validated before any heavy library loads. Robustness has its own module (robustness_params.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from capsbench.errors import CapsbenchError
from capsbench.util.precision import check_device_precision


@dataclass
class NoParams:
    """Suites without parameters of their own."""


@dataclass
class AffineParams:
    canvas: int = 40  # side of the training / test canvas (affNIST: 40)
    real_affnist: bool = True  # use <data.root>/affNIST/test.mat or test_batches/*.mat when present
    affnist_images: int | None = None  # real affNIST: its first n; the generated set: a seeded, stratified n
    generator_seed: int = 0  # the generated affNIST-style set (used without the real files)
    max_rotation_deg: float = 20.0
    max_shear: float = 0.2
    min_scale: float = 0.8
    max_scale: float = 1.2
    sweep_images: int | None = 1000  # a seeded, class-stratified draw of n MNIST test images for the sweeps; None = all
    rotation: list[float] = field(
        default_factory=lambda: [-90.0, -60.0, -45.0, -30.0, -15.0, 0.0, 15.0, 30.0, 45.0, 60.0, 90.0]
    )
    scale: list[float] = field(default_factory=lambda: [0.5, 0.7, 0.85, 1.0, 1.15, 1.3, 1.5])
    shear: list[float] = field(default_factory=lambda: [-0.6, -0.4, -0.2, 0.0, 0.2, 0.4, 0.6])
    translation: list[float] = field(default_factory=lambda: [-12.0, -9.0, -6.0, -3.0, 0.0, 3.0, 6.0, 9.0, 12.0])
    # The worst transformation per digit over a grid (Engstrom et al. 2019; defaults: their grid, 775 points): each
    # family's odd count of values equally spaced over [-limit, limit] (scales over [1 - s, 1 + s]), so the identity
    # is a grid point. worst_images: a seeded, class-stratified draw (the sweeps'); None = all, 0 = not measured.
    worst_images: int | None = 1000
    worst_rotation: float = 30.0  # degrees
    worst_rotation_steps: int = 31
    worst_translation: float = 3.0  # pixels, each axis
    worst_translation_steps: int = 5
    worst_scale: float = 0.0  # isotropic; 0: no scaling
    worst_scale_steps: int = 1

    @staticmethod
    def validate(cfg: Any) -> None:
        p = cfg.params
        if p.canvas < 28:
            raise CapsbenchError(f"params.canvas must be at least the digit's side, 28 pixels (affNIST: 40), got "
                                 f"{p.canvas}")
        for key in ("sweep_images", "affnist_images"):
            if p[key] is not None and p[key] < 1:
                raise CapsbenchError(f"params.{key} must be a count >= 1, or null for every test image, got {p[key]}")
        if not (0.0 <= p.max_rotation_deg <= 180.0 and p.max_shear >= 0.0 and 0.0 < p.min_scale <= p.max_scale):
            raise CapsbenchError(
                "the training augmentation needs params.max_rotation_deg in [0, 180], params.max_shear >= 0 and "
                f"0 < params.min_scale <= params.max_scale, got {p.max_rotation_deg}, {p.max_shear}, {p.min_scale} "
                f"and {p.max_scale}")
        sweeps = {"rotation": (lambda v: abs(v) <= 360.0, "degrees in [-360, 360]"),
                  "scale": (lambda v: v > 0.0, "factors > 0"),
                  "shear": (math.isfinite, "finite numbers"),
                  "translation": (lambda v: abs(v) < p.canvas, f"pixels within the canvas, (-{p.canvas}, {p.canvas})")}
        for key, (valid, words) in sweeps.items():
            if bad := [v for v in p[key] if not valid(v)]:
                raise CapsbenchError(f"params.{key} takes {words}; {bad} are not (an empty list measures no {key} "
                                     "sweep)")
        if p.worst_images is not None and p.worst_images < 0:
            raise CapsbenchError(f"params.worst_images must be >= 0 (0: no worst-case grid) or null for every test "
                                 f"image, got {p.worst_images}")
        limits = {"worst_rotation": (180.0, "degrees, e.g. 30"), "worst_translation": (p.canvas / 2, "pixels, e.g. 3"),
                  "worst_scale": (0.99, "e.g. 0.1 for scales 0.9 to 1.1")}
        for key, (top, example) in limits.items():
            if not 0.0 <= p[key] <= top:
                raise CapsbenchError(f"params.{key} must be in [0, {top:g}] ({example}), got {p[key]}")
            steps = p[f"{key}_steps"]
            if steps < 1 or steps % 2 == 0:
                raise CapsbenchError(f"params.{key}_steps must be an odd count >= 1 (the identity is a grid point), "
                                     f"got {steps}; e.g. {steps + 1 if steps > 0 else 1}")


@dataclass
class EfficiencyParams:
    large_batch: int = 64  # throughput and the large-batch memory measurement
    warmup: int = 3  # untimed calls before timing
    repeats: int = 10  # timed calls; the median is reported
    routing_max_iterations: int = 5  # routing module timed at r = 1..N
    memory: bool = True  # peak memory (a fresh subprocess per model, mode and batch on CPU)
    precision: str = "fp32"  # fp32 or bf16 (autocast; routing softmax and squash stay fp32); fp16 is refused
    compile: bool = False  # torch.compile the model for latency and throughput

    @staticmethod
    def validate(cfg: Any) -> None:
        check_device_precision(cfg.params.precision, cfg.device, "params.precision")
        check_timing(cfg.params)
        at_least(cfg.params, "routing_max_iterations", 2, "a slope per routing iteration needs r = 1 and 2 at least")


def check_timing(p: Any) -> None:
    """The timing knobs every timed suite shares: a batch, untimed calls before timing, and timed calls."""
    at_least(p, "large_batch", 1, "images in the throughput batch")
    at_least(p, "warmup", 0, "untimed calls before timing")
    at_least(p, "repeats", 1, "timed calls, whose median is reported")


def at_least(p: Any, key: str, low: int, what: str) -> None:
    """params.<key> is an integer >= low (`what` it counts, said in the error)."""
    value = p[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise CapsbenchError(f"params.{key} must be an integer >= {low} ({what}), got {value!r}")


@dataclass
class OverlapParams:
    """The MultiMNIST protocol knobs (defaults: the paper's), all logged as params.* in MLflow."""

    max_shift: int = 4  # each digit shifted by up to this many px per axis
    canvas: int = 36  # side of the generated image
    merge: str = "saturating_sum"  # min(a + b, 1); or "max"
    test_pairs_per_digit: int = 1000  # every test digit is the first digit of this many pairs (paper: 1,000)
    test_seed: int = 1710  # the fixed test set
    val_pairs_per_digit: int = 1  # validation pairs for model selection, from the validation split
    val_seed: int = 9829
    figure_pairs: int = 8  # test pairs in the segmentation figure of each capsule model

    @staticmethod
    def validate(cfg: Any) -> None:
        at_least(cfg.params, "test_pairs_per_digit", 1, "pairs of the fixed test set per test digit")
        at_least(cfg.params, "figure_pairs", 0, "test pairs in the segmentation figure; 0 draws none")


@dataclass
class RoutingParams:
    iterations: list[int] = field(default_factory=lambda: [1, 2, 3, 4, 5])  # r of each trained variant
    large_batch: int = 64  # throughput
    warmup: int = 2
    repeats: int = 7
    precision: str = "fp32"  # of the timing: fp32 or bf16 autocast (routing softmax and squash stay fp32)
    compile: bool = False  # torch.compile the model for the timing

    @staticmethod
    def validate(cfg: Any) -> None:
        check_device_precision(cfg.params.precision, cfg.device, "params.precision")
        check_timing(cfg.params)
        if not cfg.params.iterations or min(cfg.params.iterations) < 1:
            raise CapsbenchError(
                f"params.iterations must be a non-empty list of r >= 1, got {list(cfg.params.iterations)}"
            )
