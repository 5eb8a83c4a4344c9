"""Affine generalisation (Sabour et al. 2017, sec. 5.2): train on 40x40 expanded MNIST, test on affNIST and sweeps."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from capsbench.data import Splits
from capsbench.data.affine_augment import AugmentRanges
from capsbench.data.affnist import affnist_test_files, load_affnist_test
from capsbench.data.affnist_style import AffineRanges, cached_affnist_style
from capsbench.data.canvas import affine_matrix, centre_on_canvas, warp
from capsbench.data.test_subset import draw_test_subset
from capsbench.errors import CapsbenchError
from capsbench.suites.base import Context, Metric, Suite, test_images
from capsbench.suites.layout import Column, Group, Layout, SweepColumns, SweepPlot, TableSpec
from capsbench.suites.worst_affine import grid_of, worst_records
from capsbench.train.evaluation import correct
from capsbench.train.protocols import AffineCanvasProtocol, CanvasProtocol, TrainingProtocol
from capsbench.util.progress import measured
from capsbench.util.stats import accuracy_fields

log = logging.getLogger(__name__)


@dataclass
class AffineTestSet:
    """The affNIST(-style) images (N, 1, S, S) uint8 and labels, and a label naming which set they are."""

    images: torch.Tensor
    labels: torch.Tensor
    name: str


SWEEPS = ("rotation", "scale", "shear", "translation")
SWEEP_LABELS = {"rotation": "rotation (degrees)", "scale": "scale (factor)", "shear": "shear (horizontal)",
                "translation": "translation (pixels)"}
AFFNIST_TEST_IMAGES = 320_000  # the real affNIST test set (32 batches of 10,000)


def sweep_transform(transform: str, value: float) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(matrix, shift) of one sweep point: rotation in degrees, isotropic scale factor, horizontal shear,
    horizontal translation in pixels."""
    if transform == "rotation":
        return affine_matrix(rotation_deg=value), None
    if transform == "scale":
        return affine_matrix(scale_x=value, scale_y=value), None
    if transform == "shear":
        return affine_matrix(shear=value), None
    if transform == "translation":
        return affine_matrix(), torch.tensor([value, 0.0], dtype=torch.float64)
    raise ValueError(f"unknown sweep transform {transform!r}; expected one of {SWEEPS}")


class AffineSuite(Suite):
    description = "affNIST protocol: train on 40x40 shifted MNIST, test on affNIST(-style) and per-transform sweeps"
    metrics = (
        Metric("centred_accuracy", "%", True, "MNIST test digits centred on the 40x40 canvas"),
        Metric(
            "affnist_accuracy", "%", True, "real affNIST test set, or the generated affNIST-style set (see test_set)"
        ),
        Metric("sweep_accuracy", "%", True, "sweep test digits under one transform of the given magnitude"),
        Metric("grid_clean_accuracy", "%", True, "the worst-case grid's digits centred, untransformed",
               contains=("worst_affine_accuracy",)),
        Metric("worst_affine_accuracy", "%", True,
               "each digit right under every grid point with |rotation| <= max_rotation (Engstrom et al. 2019)"),
    )
    sweep_columns = ("test_set", "transform", "magnitude", "max_rotation", "grid")
    layout = Layout(
        tables=(
            TableSpec(
                "affnist",
                "Affine generalisation: trained on translated MNIST, tested on centred digits and affNIST",
                (Column("centred_accuracy", "centred"), Column("affnist_accuracy", "affNIST")),
                describe=("test_set",),
            ),
            TableSpec(
                "sweeps",
                "Accuracy under one transform at a time",
                (SweepColumns("sweep_accuracy", "magnitude", "accuracy ({unit}) at magnitude"),),
                split=Group("transform", SWEEPS, SWEEP_LABELS),
            ),
            TableSpec(
                "worst_affine",
                "Accuracy under each digit's worst rotation and translation of a grid",
                (
                    Column("grid_clean_accuracy", "untransformed"),
                    SweepColumns("worst_affine_accuracy", "max_rotation", "worst case ({unit}) at max_rotation"),
                ),
                describe=("grid",),
                notes=("max_rotation=R: each digit right under every grid point whose rotation is at most R degrees "
                       "either way; R=0: translations (and scales) only; the largest R: the whole grid",
                       "digits: params.worst_images test images (the sweeps' seeded, class-stratified draw), centred"),
            ),
        ),
        figures=(
            SweepPlot(
                "sweeps",
                ("sweep_accuracy",),
                "magnitude",
                facet=Group("transform", SWEEPS, SWEEP_LABELS),
                xlabel="magnitude",
                ylabels=("accuracy (%)",),
                share_x=False,
            ),
            SweepPlot(
                "worst_affine",
                ("worst_affine_accuracy",),
                "max_rotation",
                xlabel="largest |rotation| in the grid (degrees)",
                ylabels=("worst-case accuracy (%)",),
            ),
        ),
    )

    def protocol(self, cfg: Any) -> TrainingProtocol:
        """Sabour's expanded MNIST; with train.augment=affine (per model through model_train), random affine
        transforms in train.affine_* ranges before the placement: the "CNN with affine augmentation" baseline."""
        t = cfg.train
        if t.get("augment") == "affine":
            low, high = t.affine_scale
            ranges = AugmentRanges(
                max_rotation_deg=float(t.affine_rotation_deg),
                max_shear=float(t.affine_shear),
                min_scale=float(low),
                max_scale=float(high),
            )
            return AffineCanvasProtocol(canvas=cfg.params.canvas, ranges=ranges)
        return CanvasProtocol(canvas=cfg.params.canvas)

    def prepare(self, cfg: Any, splits: Splits) -> AffineTestSet:
        p = cfg.params
        real = load_affnist_test(Path(cfg.data.root), p.affnist_images) if p.real_affnist else None
        if real is not None:
            if real[0].shape[-1] != p.canvas:
                raise CapsbenchError(f"affNIST images are 40x40 but params.canvas is {p.canvas}; use params.canvas=40")
            return AffineTestSet(real[0], real[1], "affNIST")
        n = p.affnist_images
        ranges = AffineRanges(
            max_rotation_deg=p.max_rotation_deg,
            max_shear=p.max_shear,
            min_scale=p.min_scale,
            max_scale=p.max_scale,
            canvas=p.canvas,
            seed=p.generator_seed,
        )
        pick = _drawn(splits, n)  # a seeded, class-stratified draw of the test split, not its easier first half
        made = cached_affnist_style(splits.test_x[pick], splits.test_y[pick], ranges, Path(cfg.cache_dir))
        log.info(
            "affNIST files not under %s/affNIST: using the generated affNIST-style set (sha256 %s)",
            cfg.data.root,
            made.sha256,
        )
        return AffineTestSet(made.images, made.labels, f"affNIST-style sha256:{made.sha256[:16]}")

    def work(self, cfg: Any) -> float:
        """Forward passes: centred test digits, the affNIST(-style) set, every sweep point, and each worst-case digit
        at every grid point but the identity (at most: a digit leaves the grid at its first mistake)."""
        p, split = cfg.params, test_images(cfg)
        real = p.real_affnist and affnist_test_files(Path(cfg.data.root))
        affnist = p.affnist_images or (AFFNIST_TEST_IMAGES if real else split)
        sweeps = min(split, p.sweep_images or split) * sum(len(getattr(p, t)) for t in SWEEPS)
        worst = min(split, split if p.worst_images is None else p.worst_images)
        return float(split + affnist + sweeps + worst * len(grid_of(p).points()))  # the identity: the clean pass

    def measure(self, ctx: Context) -> list[dict[str, Any]]:
        p, test, split = ctx.params, ctx.resources, ctx.splits
        evaluate = dict(model=ctx.model, batch_size=ctx.batch_size, device=ctx.device)
        centred = correct(x=split.test_x, y=split.test_y, transform=ctx.protocol.eval_inputs, **evaluate)
        records = [
            {"metric": "centred_accuracy", **accuracy_fields(centred.numpy())},
            {
                "metric": "affnist_accuracy",
                **accuracy_fields(correct(x=test.images, y=test.labels, **evaluate).numpy()),
                "test_set": test.name,
            },
        ]
        done = len(split.test_y) + len(test.labels)
        measured(done)
        pick = _drawn(split, p.sweep_images)
        canvas = centre_on_canvas(split.test_x[pick], p.canvas)  # (N, 1, S, S) uint8
        labels = split.test_y[pick]
        for transform in SWEEPS:
            for value in getattr(p, transform):
                matrix, shift = sweep_transform(transform, value)
                ok = correct(x=warp(canvas, matrix, shift), y=labels, **evaluate).numpy()
                records.append(
                    {
                        "metric": "sweep_accuracy",
                        **accuracy_fields(ok),
                        "transform": transform,
                        "magnitude": float(value),
                    }
                )
                done += len(labels)
                measured(done)
        if p.worst_images != 0:
            pick = _drawn(split, p.worst_images)
            done += len(pick)
            records += worst_records(ctx.model, f"{ctx.model_name} s{ctx.seed}",
                                     centre_on_canvas(split.test_x[pick], p.canvas), split.test_y[pick], grid_of(p),
                                     batch_size=ctx.batch_size, device=ctx.device,
                                     settled=lambda pairs: measured(done + pairs))
        return records


def _drawn(splits: Splits, n: int | None) -> torch.Tensor:
    """Indices of n test images (None: all): the seeded, class-stratified draw of capsbench.data.test_subset (seed 0),
    so a subset is a sample of the test split, not its first, cleaner images."""
    labels = splits.test_y.numpy()
    return torch.from_numpy(draw_test_subset(labels, len(labels) if n is None else n, seed=0).indices)
