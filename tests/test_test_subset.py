"""The test subset: a seeded, class-stratified random draw of the test split, the same for every model, seed and run,
named in the records and in the unit key; the first n only when asked for."""

import numpy as np
import pytest
import torch
from composing import compose

from capsbench.data import load_splits
from capsbench.data.test_subset import draw_test_subset
from capsbench.errors import CapsbenchError
from capsbench.run.execute import load_data
from capsbench.run.plan import training_unit


def _labels() -> np.ndarray:
    return np.random.default_rng(1).integers(0, 10, 10_000)


def test_the_draw_is_stratified_to_within_one_image_per_class():
    labels = _labels()
    drawn = draw_test_subset(labels, 1000, seed=0)
    assert len(drawn.indices) == 1000 and len(set(drawn.indices)) == 1000
    assert np.all(np.diff(drawn.indices) > 0)
    counts = np.bincount(labels, minlength=10)
    got = np.bincount(labels[drawn.indices], minlength=10)
    assert np.all(np.abs(got - counts * 1000 / 10_000) < 1)


def test_the_same_size_and_seed_give_the_same_images_and_another_seed_others():
    labels = _labels()
    a, b = draw_test_subset(labels, 500, seed=0), draw_test_subset(labels, 500, seed=0)
    c = draw_test_subset(labels, 500, seed=1)
    assert np.array_equal(a.indices, b.indices) and a.sha256 == b.sha256
    assert not np.array_equal(a.indices, c.indices) and a.sha256 != c.sha256


def test_the_draw_is_not_the_head_and_head_is_available():
    labels = _labels()
    drawn = draw_test_subset(labels, 1000, seed=0)
    head = draw_test_subset(labels, 1000, draw="head")
    assert np.array_equal(head.indices, np.arange(1000))
    assert (drawn.indices >= 5000).sum() > 400  # about half from the harder second half of the file
    assert head.columns()["test_draw"] == "head" and drawn.columns()["test_subset_seed"] == 0


def test_all_images_when_the_subset_is_the_split():
    labels = _labels()
    assert draw_test_subset(labels, 10_000).draw == "all"


def test_real_mnist_draw_is_identical_for_every_model_and_seed(mnist_root):
    cfg = compose(["suite=robustness", "budget=smoke", f"data.root={mnist_root}", "data.download=false"])
    draws = {}
    for m in ("capsnet", "cnn_sabour"):
        for s in (0, 1):
            ucfg = training_unit(cfg, m, s).run_config()
            draws[(m, s)] = load_data(ucfg.dataset, ucfg.data).draw
    assert len({d.sha256 for d in draws.values()}) == 1
    ucfg = training_unit(cfg, "capsnet", 0).run_config()
    splits = load_data(ucfg.dataset, ucfg.data)
    whole = load_splits("mnist", root=mnist_root, download=False, val_size=5000)
    idx = torch.from_numpy(next(iter(draws.values())).indices)
    assert torch.equal(splits.test_y, whole.test_y[idx]) and len(splits.test_y) == 100


def test_a_unit_key_changes_with_the_subset_seed():
    base = ["suite=robustness", "budget=smoke"]
    a = training_unit(compose(base), "capsnet", 0).key
    b = training_unit(compose([*base, "data.test_subset_seed=1"]), "capsnet", 0).key
    c = training_unit(compose([*base, "data.test_subset_draw=head"]), "capsnet", 0).key
    assert len({a, b, c}) == 3


@pytest.mark.parametrize("setting, words", [
    ("data.test_subset=10001", "more than mnist's 10,000 test images"),
    ("data.val_size=60000", "leaves no training images"),
    ("data.test_subset_draw=first", "one of stratified, head"),
])
def test_subset_settings_are_checked_before_work(setting, words):
    with pytest.raises(CapsbenchError, match=words):
        compose(["suite=robustness", setting])
