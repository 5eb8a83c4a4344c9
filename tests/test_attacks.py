"""Attacks: known answers (margin, eps = 0, projection), early exit and the pool's width, reads and speculation
changing only the cost, random starts independent of the batch, restarts on survivors only, PGD vs FGSM, AutoAttack's
published settings, registry errors."""

import functools
from dataclasses import replace

import numpy as np
import pytest
import torch
from conftest import fit_on_bands, make_splits
from test_models import tiny_args

from capsbench import create_model, list_models
from capsbench.attacks import CATALOG, EngineSettings, build, decisions, margin, run_attack
from capsbench.attacks.schedule import Schedule
from capsbench.data import batches
from capsbench.errors import CapsbenchError
from capsbench.layers.capsules import LOG_EPS
from capsbench.models import LogitsAdapter

SETTINGS = EngineSettings(num_classes=10, seed=0, batch_size=40)
ARGS = {  # each attack's settings in these tests: few steps and queries
    "pgd": {"steps": 10}, "pgd_adaptive": {"steps": 10}, "vote": {"steps": 10}, "apgd": {"steps": 10},
    "apgd_targeted": {"steps": 10}, "square": {"queries": 50}, "pgd_detect_aware": {"steps": 10},
}
GRADIENT = ("fgsm", "pgd", "apgd", "apgd_targeted", "pgd_adaptive", "vote")


def attack(name, model, images, labels, eps_values, settings=SETTINGS, ids=None, **args):
    """capsbench.attacks.run_attack of attack `name` with ARGS's settings (updated by `args`) on every image; ids:
    their test-set indices (default 0..N-1)."""
    built = build(name, {**ARGS.get(name, {}), **args})
    ids = list(range(len(images))) if ids is None else [int(i) for i in ids]
    return run_attack(model, built, images, labels, ids, eps_values, settings)


def tiny_model(name: str = "cnn_sabour"):
    torch.manual_seed(0)
    return create_model(name, **tiny_args(name)).eval()


@functools.lru_cache(maxsize=1)
def trained_cnn():
    """A small CNN trained on the synthetic band images until it classifies them, with 48 test images it gets right."""
    splits = make_splits(n_train=512, n_test=128)
    torch.manual_seed(0)
    model = fit_on_bands(create_model("cnn_sabour", channels=(8,), fc=(32,), dropout=0.0), splits, epochs=5)
    images, labels = next(batches(splits.test_x, splits.test_y, 128))
    keep = decisions(model, images) == labels
    assert keep.float().mean() > 0.9, "the tiny model did not learn the bands"
    return model, images[keep][:48], labels[keep][:48]


def test_margin_known_answer():
    logits = torch.tensor([[1.0, 3.0, 2.0], [5.0, -1.0, 0.5]])
    labels = torch.tensor([0, 0])
    assert torch.allclose(margin(logits, labels), torch.tensor([2.0, -4.5]))


@pytest.mark.parametrize("name", list_models())
def test_adapter_preserves_the_classifier_decision(name):
    model = tiny_model(name)
    x = torch.rand(16, 1, 28, 28)
    logits = LogitsAdapter(model)(x)
    assert logits.shape == (16, 10)
    assert torch.equal(logits.argmax(1), decisions(model, x))
    out = model(x)
    scores_are_lengths = (
        out.poses is not None and out.poses.dim() == 3 and torch.allclose(out.poses.norm(dim=-1), out.scores)
    )
    if scores_are_lengths:  # log-normalised lengths log(l / sum l), with an epsilon, never raw lengths
        lengths = out.scores
        expected = torch.log(lengths + LOG_EPS) - torch.log(lengths.sum(1, keepdim=True) + LOG_EPS)
        assert torch.allclose(logits, expected, atol=1e-5) and not torch.allclose(logits, lengths)


@pytest.mark.parametrize("name", GRADIENT)
def test_eps_zero_leaves_the_clean_images_exactly(name):
    model = tiny_model("capsnet")
    x = torch.rand(8, 1, 28, 28)
    y = decisions(model, x)
    result = attack(name, model, x, y, [0.0, 0.1])
    assert torch.equal(result.adversarial[0.0], x) and not result.broken[0.0].any()


@pytest.mark.parametrize("name", [*GRADIENT, "square"])
def test_adversarial_images_stay_in_the_ball_and_in_range(name):
    model = tiny_model("capsnet")
    x = torch.rand(8, 1, 28, 28)
    y = decisions(model, x)
    result = attack(name, model, x, y, [0.1])
    adv = result.adversarial[0.1]
    assert (adv - x).abs().max() <= 0.1 + 1e-6 and adv.min() >= 0 and adv.max() <= 1
    assert torch.equal(result.broken[0.1], decisions(model, adv) != y)  # broken means: the real model is fooled


@functools.lru_cache(maxsize=1)
def trained_capsnet():
    """The tiny capsnet trained on the synthetic band images, with 16 test images it gets right: attacks on it need
    their steps (an untrained one flips at the random start)."""
    splits = make_splits(n_train=384, n_test=64)
    model = fit_on_bands(tiny_model("capsnet").train(), splits, epochs=2)
    images, labels = next(batches(splits.test_x, splits.test_y, 64))
    keep = decisions(model, images) == labels
    assert keep.float().mean() > 0.9, "the tiny capsnet did not learn the bands"
    return model, images[keep][:16], labels[keep][:16]


@pytest.mark.parametrize("name, grid", [
    ("fgsm", [0.0, 0.1, 0.15, 0.2]),
    ("pgd", [0.0, 0.1, 0.15, 0.2]),
    ("apgd", [0.0, 0.1, 0.15, 0.2]),
    ("apgd_targeted", [0.0, 0.15, 0.2]),
    ("square", [0.0, 0.01, 0.03]),
    ("pgd_adaptive", [0.0, 0.03, 0.06, 0.1]),
    ("vote", [0.0, 0.03, 0.06, 0.1]),
])
def test_early_exit_and_the_pools_shape_change_the_cost_not_the_result(name, grid):
    """Early exit off, and the engine as on a GPU (a read every 3 iterates, rows entering before what they wait for
    has finished, a pool of 7 rows), break exactly the images the default breaks; on models where the steps matter
    (trained ones; Square's queries on the untrained capsnet)."""
    if name == "square":
        model = tiny_model("capsnet")
        x = torch.rand(24, 1, 28, 28, generator=torch.Generator().manual_seed(0))
        y = decisions(model, x)
    else:
        model, x, y = trained_capsnet() if name in ("pgd_adaptive", "vote") else trained_cnn()
    args = {} if name in ("fgsm", "square") else {"steps": 5}
    fast = attack(name, model, x, y, grid, **args)
    assert any(0 < int(b.sum()) < len(x) for b in fast.broken.values()), "the known answer needs both outcomes"
    gpu_like = replace(SETTINGS, compact_every=3, speculate=True, batch_size=7)
    for other in (replace(SETTINGS, early_exit=False), gpu_like):
        slow = attack(name, model, x, y, grid, other, **args)
        for eps in grid:
            assert torch.equal(fast.broken[eps], slow.broken[eps]), (other, eps)


def test_random_starts_do_not_depend_on_the_other_images_in_the_batch():
    model, x, y = trained_cnn()
    ids = torch.arange(len(x))
    together = attack("pgd", model, x, y, [0.1], ids=ids)
    alone = attack("pgd", model, x[3:4], y[3:4], [0.1], ids=ids[3:4])
    assert torch.allclose(together.adversarial[0.1][3], alone.adversarial[0.1][0], atol=1e-6)


def test_later_passes_attack_only_the_survivors(monkeypatch):
    """pgd with 3 restarts runs 6 passes (ce, margin per restart): each on the rows every earlier one left robust."""
    model, x, y = trained_cnn()
    admitted = []
    original = Schedule.admit

    def recording(self, room):
        rows = original(self, room)
        admitted.append(rows.step.copy())
        return rows

    monkeypatch.setattr(Schedule, "admit", recording)
    result = attack("pgd", model, x, y, [0.3], replace(SETTINGS, batch_size=1000), restarts=3, steps=3)
    per_pass = np.bincount(np.concatenate(admitted), minlength=6)
    survivors = (~result.broken[0.3]).sum().item()
    assert per_pass[0] == len(x) and all(a >= b for a, b in zip(per_pass, per_pass[1:])), per_pass
    assert per_pass[0] > per_pass[-1] >= survivors, per_pass


def test_pgd_is_at_least_as_strong_as_fgsm_on_a_trained_model():
    model, x, y = trained_cnn()
    acc = {}
    for name in ("fgsm", "pgd"):
        result = attack(name, model, x, y, [0.1, 0.2, 0.3])
        acc[name] = {e: 1 - b.float().mean().item() for e, b in result.broken.items()}
    assert all(acc["pgd"][e] <= acc["fgsm"][e] for e in acc["pgd"]), acc
    assert acc["pgd"][0.3] < 0.5, f"PGD at eps=0.3 barely hurts the model: {acc}"


def test_unknown_attack_names_close_matches():
    with pytest.raises(CapsbenchError, match="did you mean 'pgd_adaptive'"):
        build("pgd_adaptiv")


def test_autoattack_is_the_standard_version_with_a_fixed_seed():
    import torchattacks

    aa = build("autoattack").build(LogitsAdapter(tiny_model()), 0.3, SETTINGS)
    apgd, apgdt, fab, square = aa.attacks
    assert (type(apgd), type(apgdt), type(fab), type(square)) == (
        torchattacks.APGD,
        torchattacks.APGDT,
        torchattacks.FAB,
        torchattacks.Square,
    )
    assert apgd.steps == apgdt.steps == fab.steps == 100 and square.n_queries == 5000
    assert apgd.loss == "ce" and fab.multi_targeted and apgdt.n_target_classes == fab.n_target_classes == 9
    assert {a.seed for a in aa.attacks} == {0} and all(a.n_restarts == 1 for a in aa.attacks)
    assert all(a.eps == 0.3 and a.norm == "Linf" for a in aa.attacks)


def test_every_attack_states_what_it_attacks_and_its_budget():
    for name in CATALOG.names():
        built = build(name)
        assert built.name == name and built.attacks and built.budget(10)
