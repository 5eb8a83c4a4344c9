"""The worst-case affine grid: known answers of the transform (identity, a quarter turn, a one-pixel shift, the sweeps'
warp), a grid whose finer twin holds it, a search with early exit that equals the full per-point table, the records and
declared work of the affine suite, and its settings checked before anything runs."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from composing import compose
from torch import nn

from capsbench.data.affine_grid import TransformGrid, spaced, transform
from capsbench.data.canvas import affine_matrix, warp
from capsbench.errors import CapsbenchError
from capsbench.models import create_model
from capsbench.suites import SUITES, Context
from capsbench.suites.affine import AffineTestSet
from capsbench.suites.worst_affine import first_mistakes

IDENTITY = (0.0, 0.0, 0.0, 1.0)


def each(images: torch.Tensor, point: tuple[float, ...]) -> torch.Tensor:
    return transform(images, torch.tensor([point], dtype=torch.float64).expand(len(images), 4))


@pytest.fixture
def canvases():
    return torch.randint(0, 256, (3, 1, 40, 40), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)


def test_the_identity_point_leaves_every_pixel_as_it_was(canvases):
    assert torch.equal(each(canvases, IDENTITY), canvases.float() / 255)


@pytest.mark.parametrize("turns", [1, -1, 2])
def test_a_quarter_turn_of_an_asymmetric_image_is_rot90(canvases, turns):
    # positive angles turn the content counter-clockwise as displayed, as torch.rot90 with k=1 does
    assert torch.equal(each(canvases, (90.0 * turns, 0.0, 0.0, 1.0)), torch.rot90(canvases, turns, (-2, -1)) / 255)


@pytest.mark.parametrize(("dx", "dy", "at"), [(1.0, 0.0, (10, 13)), (0.0, 1.0, (11, 12)), (-1.0, -1.0, (9, 11))])
def test_a_one_pixel_translation_moves_a_one_hot_pixel_by_one(dx, dy, at):
    one = torch.zeros(1, 1, 40, 40, dtype=torch.uint8)
    one[0, 0, 10, 12] = 255  # row 10, column 12: x right, y down
    moved = each(one, (0.0, dx, dy, 1.0))
    assert moved.nonzero().tolist() == [[0, 0, *at]] and moved.max() == 1.0


@pytest.mark.parametrize("point", [(30.0, 1.5, -1.5, 1.0), (-17.0, 0.3, 2.0, 1.1), (8.0, -3.0, 3.0, 0.9)])
def test_grid_sample_gives_the_sweeps_warp_to_one_grey_level(canvases, point):
    r, dx, dy, s = point
    ours = each(canvases, point) * 255
    sweeps = warp(canvases, affine_matrix(rotation_deg=r, scale_x=s, scale_y=s), torch.tensor([dx, dy]).double())
    assert (ours - sweeps.float()).abs().max() <= 1.0  # float64 both ways: only a tie at x.5 can round apart


def test_the_grid_is_symmetric_holds_the_identity_and_its_finer_twin_holds_it():
    assert spaced(30.0, 7) == [-30.0, -20.0, -10.0, 0.0, 10.0, 20.0, 30.0] and spaced(3.0, 1) == [0.0]
    grid = TransformGrid(30.0, 7, 3.0, 3, 0.1, 3)
    points = grid.points()
    assert points.shape == (7 * 3 * 3 * 3, 4) and (points == torch.tensor(IDENTITY).double()).all(1).sum() == 1
    assert grid.describe() == "rotation=-30:30:7 translation=-3:3:3 scale=0.9:1.1:3"
    finer = grid.finer()
    assert finer.describe() == "rotation=-30:30:13 translation=-3:3:5 scale=0.9:1.1:5"
    fine = {tuple(p) for p in finer.points().tolist()}
    assert all(tuple(p) in fine for p in points.tolist())  # exactly: the same floats, not nearly
    with pytest.raises(ValueError, match="odd"):
        spaced(30.0, 4)


class Centroid(nn.Module):
    """A classifier whose class is the 8 x 8 cell of the ink's centroid (mod 10): a move of the ink may change it."""

    def forward(self, x: torch.Tensor) -> SimpleNamespace:
        size = x.shape[-1]
        at = torch.arange(size, dtype=x.dtype)
        mass = x.sum(dim=(1, 2, 3)).clamp(min=1e-6)
        row = (x.sum(dim=(1, 3)) * at).sum(1) / mass
        col = (x.sum(dim=(1, 2)) * at).sum(1) / mass
        cls = ((row / 8).floor() * 5 + (col / 8).floor()).long() % 10
        return SimpleNamespace(scores=nn.functional.one_hot(cls, 10).float())


def test_the_search_with_early_exit_equals_the_full_table_of_every_point():
    g = torch.Generator().manual_seed(1)
    canvas = torch.zeros(40, 1, 40, 40, dtype=torch.uint8)
    for i in range(40):  # a blob away from the centre, so rotations move it
        r, c = torch.randint(8, 28, (2,), generator=g).tolist()
        canvas[i, 0, r:r + 5, c:c + 4] = 255
    model, grid = Centroid(), TransformGrid(30.0, 7, 2.0, 5)
    points = grid.points()
    with torch.no_grad():
        table = np.stack([model(each(canvas, tuple(p))).scores.argmax(1).numpy() for p in points.tolist()], 1)
    labels = torch.from_numpy(table[:, (points == torch.tensor(IDENTITY).double()).all(1).numpy()][:, 0].copy())
    labels[::5] = (labels[::5] + 1) % 10  # some digits wrong untransformed
    right = table == labels.numpy()[:, None]  # (N, G)
    clean = right[:, (points == torch.tensor(IDENTITY).double()).all(1).numpy()][:, 0]
    for batch in (3, 500):
        seen = []
        first = first_mistakes(model, canvas, labels, clean, grid, batch_size=batch, device="cpu",
                               settled=seen.append)
        for radius in sorted(set(points[:, 0].abs().tolist())):
            within = (points[:, 0].abs() <= radius).numpy()
            assert np.array_equal(first > radius, right[:, within].all(1)), (batch, radius)
        assert seen == sorted(seen) and seen[-1] == len(labels) * (len(points) - 1)  # progress only moves on
    assert 0 < right.all(1).sum() < clean.sum() < len(clean), "the check needs digits kept, broken by a move, and wrong"


@pytest.fixture
def smoke(tmp_path):
    return compose(["suite=affine", "budget=smoke", f"output_dir={tmp_path}", "tracking.enabled=false", "device=cpu"])


def test_the_suite_records_the_grid_and_a_worst_case_no_better_than_untransformed(smoke, tiny_splits):
    suite = SUITES.get("affine")()
    protocol = suite.protocol(smoke)
    p = smoke.params
    p.sweep_images = p.worst_images = None  # the same digits for the sweeps and the grid
    p.worst_rotation_steps, p.worst_translation_steps = 5, 3
    torch.manual_seed(0)
    model = create_model("capsnet", image_size=40, conv_channels=8, primary_types=2, class_dim=4, decoder_hidden=[])
    test = AffineTestSet(protocol.eval_inputs(tiny_splits.test_x), tiny_splits.test_y, "affNIST-style sha256:0123")
    ctx = Context(model=model, model_name="capsnet", splits=tiny_splits, params=p, device="cpu", batch_size=16,
                  seed=0, protocol=protocol, resources=test)
    records = suite.measure(ctx)
    clean = next(r for r in records if r["metric"] == "grid_clean_accuracy")
    worst = [r for r in records if r["metric"] == "worst_affine_accuracy"]
    grid = "rotation=-30:30:5 translation=-3:3:3 scale=1:1:1"
    assert [r["max_rotation"] for r in worst] == [0.0, 15.0, 30.0] and {r["grid"] for r in worst} == {grid}
    assert clean["grid"] == grid and clean["n"] == len(tiny_splits.test_y)
    identity = next(r["value"] for r in records if r["metric"] == "sweep_accuracy" and r["transform"] == "rotation"
                    and r["magnitude"] == 0.0)
    assert clean["value"] == identity  # the grid's identity point is the sweeps' centred digits
    values = [clean["value"], *(r["value"] for r in worst)]
    assert values == sorted(values, reverse=True)


def test_declared_work_counts_every_grid_point_of_every_grid_digit(smoke):
    p = smoke.params
    sweeps = p.sweep_images * sum(len(p[t]) for t in ("rotation", "scale", "shear", "translation"))
    grid = p.worst_images * 3 * 3 * 3  # smoke: 3 rotations x 3 x 3 translations, each digit
    assert SUITES.get("affine")().work(smoke) == 300 + p.affnist_images + sweeps + grid
    smoke.params.worst_images = 0  # off
    assert SUITES.get("affine")().work(smoke) == 300 + p.affnist_images + sweeps


@pytest.mark.parametrize(("setting", "message"), [
    ("params.worst_rotation_steps=4", "odd count"),
    ("params.worst_translation_steps=0", "odd count"),
    ("params.worst_rotation=200", r"worst_rotation must be in \[0, 180\]"),
    ("params.worst_translation=25", r"worst_translation must be in \[0, 20\]"),
    ("params.worst_scale=1.5", "worst_scale must be"),
    ("params.worst_images=-1", "worst_images must be >= 0"),
    ("params.canvas=0", "params.canvas must be at least the digit's side"),
    ("params.sweep_images=-1", "params.sweep_images must be a count >= 1"),
    ("params.affnist_images=-5", "params.affnist_images must be a count >= 1"),
    ("params.scale=[0.0,1.0]", r"params.scale takes factors > 0; \[0.0\] are not"),
    ("params.translation=[100.0]", "params.translation takes pixels within the canvas"),
    ("params.rotation=[1000.0]", "params.rotation takes degrees"),
    ("params.min_scale=0", "0 < params.min_scale <= params.max_scale"),
])
def test_a_grid_that_cannot_work_is_refused_before_anything_runs(tmp_path, setting, message):
    with pytest.raises(CapsbenchError, match=message):
        compose(["suite=affine", f"output_dir={tmp_path}", setting])

