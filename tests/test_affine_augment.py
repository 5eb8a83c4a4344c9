"""train.augment=affine: the augmentation's transforms lie in the stated ranges, follow the canvas warp's convention,
keep every digit's ink on the canvas, and give the affine suite its own protocol and checkpoint key."""

import pytest
import torch
from composing import compose

from capsbench.data.affine_augment import (
    AugmentRanges,
    affine_matrices,
    draw_transforms,
    place_keeping_ink,
    random_affine_on_canvas,
    warp_about_centre,
)
from capsbench.data.canvas import affine_matrix, centre_on_canvas, warp
from capsbench.errors import CapsbenchError
from capsbench.run.plan import plan
from capsbench.suites.affine import AffineSuite
from capsbench.train.protocols import AffineCanvasProtocol, CanvasProtocol
from tests.conftest import make_splits


def test_batched_matrices_equal_the_canvas_convention():
    params = torch.tensor([[0.0, 0.0, 1.0, 1.0], [90.0, 0.0, 1.0, 1.0], [-17.5, 0.13, 0.85, 1.15]], dtype=torch.float64)
    batched = affine_matrices(*params.unbind(dim=1))
    for row, a in zip(params.tolist(), batched):
        expected = affine_matrix(rotation_deg=row[0], shear=row[1], scale_x=row[2], scale_y=row[3])
        assert torch.allclose(a, expected, atol=1e-12)


def test_draws_lie_in_the_stated_ranges_and_fill_them():
    ranges = AugmentRanges(max_rotation_deg=15.0, max_shear=0.1, min_scale=0.9, max_scale=1.1)
    draws = draw_transforms(20000, ranges, torch.Generator().manual_seed(0))  # (N, 4)
    low = torch.tensor([-15.0, -0.1, 0.9, 0.9], dtype=torch.float64)
    high = torch.tensor([15.0, 0.1, 1.1, 1.1], dtype=torch.float64)
    assert ((draws >= low) & (draws <= high)).all()
    width = high - low
    assert ((draws.amin(dim=0) - low) < 0.01 * width).all() and ((high - draws.amax(dim=0)) < 0.01 * width).all()
    assert draws[:, 0].abs().mean().item() == pytest.approx(7.5, rel=0.03)  # uniform: E|rotation| = r / 2


def test_warp_matches_the_float64_canvas_warp():
    digits = torch.zeros(3, 1, 28, 28, dtype=torch.uint8)
    digits[:, :, 6:22, 12:16] = 255  # a bar
    canvas = centre_on_canvas(digits, 40)
    a = affine_matrices(*torch.tensor([[20.0, 0.2, 0.8, 1.2], [-20.0, -0.2, 1.2, 0.8], [90.0, 0.0, 1.0, 1.0]],
                                      dtype=torch.float64).unbind(dim=1))
    ours = warp_about_centre(canvas.float() / 255, a.float())
    reference = warp(canvas, a).float() / 255  # rounded to uint8 levels
    assert (ours - reference).abs().max() <= 0.5 / 255 + 1e-4


def test_placement_keeps_every_inked_pixel_and_moves_by_whole_pixels():
    images = torch.zeros(200, 1, 12, 12)
    images[:, 0, 3:6, 4:9] = torch.rand(200, 3, 5) + 0.1  # ink in rows 3..5, columns 4..8
    moved, shift = place_keeping_ink(images, torch.Generator().manual_seed(0))
    assert torch.allclose(moved.sum(dim=(1, 2, 3)), images.sum(dim=(1, 2, 3)))  # nothing wrapped or cut off
    assert shift[:, 0].min() == -4 and shift[:, 0].max() == 3 and shift[:, 1].min() == -3 and shift[:, 1].max() == 6
    for i in range(0, 200, 37):
        dx, dy = shift[i].tolist()
        assert torch.equal(moved[i, 0, 3 + dy : 6 + dy, 4 + dx : 9 + dx], images[i, 0, 3:6, 4:9])


def test_augmented_canvas_parameters_in_range_and_ink_on_canvas():
    digits = make_splits(n_train=64).train_x.float() / 255
    out, params = random_affine_on_canvas(digits, 40, AugmentRanges(), torch.Generator().manual_seed(3))
    assert out.shape == (64, 1, 40, 40) and params.shape == (64, 6)
    assert params[:, 0].abs().max() <= 20 and params[:, 1].abs().max() <= 0.2
    assert ((params[:, 2:4] >= 0.8) & (params[:, 2:4] <= 1.2)).all()
    warped = warp_about_centre(centre_on_canvas(digits, 40), affine_matrices(*params[:, :4].unbind(dim=1)))
    assert torch.allclose(out.sum(dim=(1, 2, 3)), warped.sum(dim=(1, 2, 3)), rtol=1e-5)  # the shift loses no ink


def test_affine_suite_trains_augmented_models_on_their_own_protocol(tmp_path):
    cfg = compose(["suite=affine", "budget=smoke", f"output_dir={tmp_path}", "models=[cnn_sabour,capsnet]",
                   "model_train.cnn_sabour.augment=affine", "model_train.cnn_sabour.affine_rotation_deg=10"])
    units = {u.model: u for u in plan(cfg)}
    assert units["cnn_sabour"].variant == {"training": "affine"} and units["capsnet"].variant == {}
    augmented = AffineSuite().protocol(units["cnn_sabour"].run_config())
    plain = AffineSuite().protocol(units["capsnet"].run_config())
    assert isinstance(augmented, AffineCanvasProtocol) and type(plain) is CanvasProtocol
    assert augmented.identity() == {"protocol": "affine_canvas", "canvas": 40, "max_rotation_deg": 10.0,
                                    "max_shear": 0.2, "min_scale": 0.8, "max_scale": 1.2}
    batch = augmented.train_batch(torch.rand(5, 1, 28, 28), torch.arange(5), torch.Generator().manual_seed(0))
    assert batch.inputs.shape == (5, 1, 40, 40)
    assert torch.equal(augmented.eval_inputs(torch.ones(2, 1, 28, 28)), plain.eval_inputs(torch.ones(2, 1, 28, 28)))


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["suite=affine", "train.augment=afine"], "did you mean 'affine'"),
        (["suite=accuracy", "train.augment=affine"], "applies to suite=affine"),
        (
            ["suite=affine", "train.augment=affine", "train.affine_scale=[1.2,0.8]"],
            "train.affine_scale must be two numbers",
        ),
        (
            ["suite=affine", "model_train.cnn_9x9.augment=affine", "model_train.cnn_9x9.affine_shear=-0.1"],
            "model_train.cnn_9x9.affine_shear must be a number >= 0",
        ),
    ],
)
def test_bad_augmentation_settings_name_the_fix(tmp_path, overrides, message):
    with pytest.raises(CapsbenchError, match=message):
        compose([*overrides, f"output_dir={tmp_path}"])
