"""MultiMNIST generation: pairs, shifts, merge, the fixed test set, box overlap, and the top-2 metrics."""

import pytest
import torch

from capsbench.data import load_splits
from capsbench.data.multimnist import (
    PairRecipe,
    bounding_boxes,
    box_overlap,
    draw_partners,
    make_recipe,
    merge,
    pair_labels,
    place,
    render,
)
from capsbench.train.multimnist_protocol import MultiMNISTProtocol, both_correct, digits_found
from tests.conftest import make_splits


def test_pairs_have_distinct_labels_and_shifts_within_bounds():
    labels = torch.randint(0, 10, (3000,), generator=torch.Generator().manual_seed(0))
    recipe = make_recipe(labels, pairs_per_digit=3, max_shift=4, seed=1)
    assert len(recipe) == 9000
    assert torch.equal(recipe.first, torch.arange(3000).repeat_interleave(3))  # every digit first, 3 times
    pairs = pair_labels(labels, recipe)
    assert (pairs[:, 0] != pairs[:, 1]).all()
    assert recipe.offsets.abs().max() == 4 and recipe.offsets.min() == -4
    assert len(recipe.offsets.view(-1, 2).unique(dim=0)) == 81  # all 9x9 (dy, dx) shifts occur
    # partners are spread over the other classes, not one favourite
    assert set(pairs[pairs[:, 0] == 3, 1].tolist()) == set(range(10)) - {3}


def test_partner_draw_needs_two_classes():
    with pytest.raises(ValueError, match="all 5 labels are 7"):
        draw_partners(torch.full((5,), 7), torch.Generator().manual_seed(0))


def test_place_moves_a_pixel_by_its_offset_on_the_canvas():
    img = torch.zeros(3, 1, 28, 28)
    img[:, 0, 10, 20] = 1.0
    out = place(img, torch.tensor([[0, 0], [-4, 4], [3, -2]]), 36)
    assert out.shape == (3, 1, 36, 36)
    pos = out[:, 0].flatten(1).argmax(1)
    assert (pos // 36).tolist() == [14, 10, 17] and (pos % 36).tolist() == [24, 28, 22]  # margin 4 + (10, 20) + offset
    assert torch.equal(out.sum(dim=(1, 2, 3)), torch.ones(3))


def test_merge_rules():
    a, b = torch.tensor([0.2, 0.7, 0.0]), torch.tensor([0.5, 0.6, 0.0])
    assert torch.allclose(merge(a, b, "saturating_sum"), torch.tensor([0.7, 1.0, 0.0]))
    assert torch.allclose(merge(a, b, "max"), torch.tensor([0.5, 0.7, 0.0]))
    with pytest.raises(ValueError, match="saturating_sum"):
        merge(a, b, "sum")


def test_render_merges_the_two_placed_digits():
    splits = make_splits(n_train=40)
    recipe = make_recipe(splits.train_y, pairs_per_digit=1, max_shift=4, seed=0)
    inputs, parts = render(splits.train_x, recipe, canvas=36, rule="saturating_sum")
    assert inputs.shape == (40, 1, 36, 36) and parts.shape == (40, 2, 1, 36, 36)
    assert torch.allclose(inputs, (parts[:, 0] + parts[:, 1]).clamp(max=1))
    assert inputs.max() <= 1.0 and inputs.min() >= 0.0
    # each component carries exactly its digit's ink
    for k, index in enumerate((recipe.first, recipe.second)):
        assert torch.allclose(parts[:, k].sum(dim=(1, 2, 3)), splits.train_x[index].float().sum(dim=(1, 2, 3)) / 255)


def test_fixed_test_set_is_identical_across_runs_and_cached(tmp_path):
    splits = make_splits(n_test=200)
    a = MultiMNISTProtocol(cache_dir=tmp_path / "a").test_recipe(splits, pairs_per_digit=5, seed=3)
    cached = list((tmp_path / "a").glob("multimnist-test-*.pt"))
    assert len(cached) == 1
    mtime = cached[0].stat().st_mtime_ns
    again = MultiMNISTProtocol(cache_dir=tmp_path / "a").test_recipe(splits, pairs_per_digit=5, seed=3)
    fresh = MultiMNISTProtocol(cache_dir=tmp_path / "b").test_recipe(splits, pairs_per_digit=5, seed=3)
    assert cached[0].stat().st_mtime_ns == mtime  # read back, not regenerated
    for other in (again, fresh):
        assert all(torch.equal(x, y) for x, y in zip(a.to_dict().values(), other.to_dict().values()))
    other_seed = MultiMNISTProtocol(cache_dir=tmp_path / "a").test_recipe(splits, pairs_per_digit=5, seed=4)
    assert not torch.equal(a.offsets, other_seed.offsets)


def nominal_boxes(n: int) -> torch.Tensor:
    """Every digit in Sabour's nominal 20x20 box, centred in the 28x28 image."""
    return torch.tensor([[4, 4, 24, 24]]).expand(n, 4).clone()


def test_box_overlap_known_answers():
    labels = torch.arange(100_000) % 10
    same_place = make_recipe(labels, pairs_per_digit=1, max_shift=0, seed=0)
    assert torch.equal(box_overlap(nominal_boxes(100_000), same_place), torch.ones(100_000))
    # Independent shifts in [-4, 4] per digit and axis: the relative shift d has E|d| = (9^2 - 1) / (3 * 9) = 80/27,
    # so E[overlap] = (1 - E|d| / 20)^2 = 0.72565 for 20x20 boxes (Sabour et al. round this to "about 80 %").
    shifted = make_recipe(labels, pairs_per_digit=1, max_shift=4, seed=0)
    assert box_overlap(nominal_boxes(100_000), shifted).mean().item() == pytest.approx(
        (1 - 80 / 27 / 20) ** 2, abs=0.003
    )
    two = PairRecipe(torch.tensor([0]), torch.tensor([1]), torch.tensor([[[0, 0], [0, 10]]]))
    assert box_overlap(nominal_boxes(2), two).item() == pytest.approx(0.5)  # half the box slides away


def test_bounding_boxes_of_a_known_blob():
    img = torch.zeros(1, 1, 28, 28, dtype=torch.uint8)
    img[0, 0, 5:9, 10:12] = 200
    assert bounding_boxes(img).tolist() == [[5, 10, 9, 12]]


def test_real_mnist_box_overlap_matches_the_protocol(mnist_root):
    splits = load_splits("mnist", root=mnist_root, download=False, val_size=5000)
    recipe = make_recipe(splits.test_y, pairs_per_digit=1, max_shift=4, seed=0)
    overlap = box_overlap(bounding_boxes(splits.test_x), recipe).mean().item()
    assert overlap == pytest.approx((1 - 80 / 27 / 20) ** 2, abs=0.03)  # tight boxes behave like the nominal 20x20
    closer = box_overlap(
        bounding_boxes(splits.test_x), make_recipe(splits.test_y, pairs_per_digit=1, max_shift=2, seed=0)
    )
    assert closer.mean().item() > overlap


def test_top2_metrics_on_hand_made_scores():
    scores = torch.tensor(
        [
            [0.9, 0.8, 0.1, 0.0],  # top-2 {0, 1}
            [0.1, 0.2, 0.9, 0.8],  # top-2 {2, 3}
            [0.9, 0.1, 0.8, 0.0],  # top-2 {0, 2}
            [0.1, 0.2, 0.3, 0.9],  # top-2 {3, 2}
        ]
    )
    pairs = torch.tensor([[1, 0], [2, 3], [0, 1], [0, 1]])
    assert both_correct(scores, pairs).tolist() == [True, True, False, False]
    assert digits_found(scores, pairs).tolist() == [[True, True], [True, True], [True, False], [False, False]]
    assert digits_found(scores, pairs).float().mean().item() == pytest.approx(5 / 8)
