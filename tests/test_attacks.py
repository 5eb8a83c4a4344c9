"""Attacks: known answers (margin, eps = 0, projection), early exit changing only the cost, random starts independent
of the batch, restarts on survivors only, PGD vs FGSM, AutoAttack's published settings, registry errors."""

import functools

import pytest
import torch
from conftest import make_splits
from test_models import tiny_args

from capsbench import create_model, list_models
from capsbench.attacks import ATTACKS, AttackSettings, decisions, margin
from capsbench.attacks.pgd import PGD
from capsbench.data import batches
from capsbench.errors import CapsbenchError
from capsbench.layers.capsules import LOG_EPS
from capsbench.models import LogitsAdapter

SETTINGS = AttackSettings(
    steps=10, step_ratio=2.5, restarts=1, square_queries=50, num_classes=10, seed=0, batch_size=40
)
GRADIENT = ("fgsm", "pgd", "apgd", "apgd_targeted", "pgd_adaptive", "vote")


def tiny_model(name: str = "cnn_sabour"):
    torch.manual_seed(0)
    return create_model(name, **tiny_args(name)).eval()


@functools.lru_cache(maxsize=1)
def trained_cnn():
    """A small CNN trained on the synthetic band images until it classifies them, with 48 test images it gets right."""
    splits = make_splits(n_train=512, n_test=128)
    torch.manual_seed(0)
    model = create_model("cnn_sabour", channels=(8,), fc=(32,), dropout=0.0)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        for images, labels in batches(splits.train_x, splits.train_y, 32, shuffle_generator=gen):
            loss = model.loss(model(images), labels, images)
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
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


@pytest.mark.parametrize("attack", GRADIENT)
def test_eps_zero_leaves_the_clean_images_exactly(attack):
    model = tiny_model("capsnet")
    x = torch.rand(8, 1, 28, 28)
    y = decisions(model, x)
    result = ATTACKS.get(attack).run(model, x, y, torch.arange(8), [0.0, 0.1], SETTINGS)
    assert torch.equal(result.adversarial[0.0], x) and not result.broken[0.0].any()


@pytest.mark.parametrize("attack", [*GRADIENT, "square"])
def test_adversarial_images_stay_in_the_ball_and_in_range(attack):
    model = tiny_model("capsnet")
    x = torch.rand(8, 1, 28, 28)
    y = decisions(model, x)
    result = ATTACKS.get(attack).run(model, x, y, torch.arange(8), [0.1], SETTINGS)
    adv = result.adversarial[0.1]
    assert (adv - x).abs().max() <= 0.1 + 1e-6 and adv.min() >= 0 and adv.max() <= 1
    assert torch.equal(result.broken[0.1], decisions(model, adv) != y)  # broken means: the real model is fooled


@pytest.mark.parametrize("attack", GRADIENT)
def test_early_exit_changes_the_cost_not_the_result(attack):
    model, x, y = trained_cnn() if attack in ("fgsm", "pgd") else (tiny_model("capsnet"), None, None)
    if x is None:
        x = torch.rand(24, 1, 28, 28)
        y = decisions(model, x)
    ids, grid = torch.arange(len(x)), [0.0, 0.05, 0.1, 0.2]
    fast = ATTACKS.get(attack).run(model, x, y, ids, grid, SETTINGS)
    slow = ATTACKS.get(attack).run(model, x, y, ids, grid, AttackSettings(**{**SETTINGS.__dict__, "early_exit": False}))
    for eps in grid:
        assert torch.equal(fast.broken[eps], slow.broken[eps]), eps


def test_random_starts_do_not_depend_on_the_other_images_in_the_batch():
    model, x, y = trained_cnn()
    ids = torch.arange(len(x))
    together = ATTACKS.get("pgd").run(model, x, y, ids, [0.1], SETTINGS)
    alone = ATTACKS.get("pgd").run(model, x[3:4], y[3:4], ids[3:4], [0.1], SETTINGS)
    assert torch.allclose(together.adversarial[0.1][3], alone.adversarial[0.1][0], atol=1e-6)


def test_later_runs_attack_only_the_survivors(monkeypatch):
    model, x, y = trained_cnn()
    rows_per_run = []
    original = PGD._attack_chunk

    def recording(self, *args):
        import capsbench.attacks.pgd as pgd_module

        real = pgd_module.pgd_rows

        def spy(objective, images, *args, **kwargs):
            rows_per_run.append(len(images))
            return real(objective, images, *args, **kwargs)

        monkeypatch.setattr(pgd_module, "pgd_rows", spy)
        original(self, *args)

    monkeypatch.setattr(PGD, "_attack_chunk", recording)
    settings = AttackSettings(**{**SETTINGS.__dict__, "restarts": 3, "batch_size": 1000, "steps": 3})
    result = ATTACKS.get("pgd").run(model, x, y, torch.arange(len(x)), [0.3], settings)
    survivors = (~result.broken[0.3]).sum().item()
    assert rows_per_run[0] == len(x) and all(a >= b for a, b in zip(rows_per_run, rows_per_run[1:]))
    assert rows_per_run[-1] >= survivors


def test_pgd_is_at_least_as_strong_as_fgsm_on_a_trained_model():
    model, x, y = trained_cnn()
    acc = {}
    for name in ("fgsm", "pgd"):
        result = ATTACKS.get(name).run(model, x, y, torch.arange(len(x)), [0.1, 0.2, 0.3], SETTINGS)
        acc[name] = {e: 1 - b.float().mean().item() for e, b in result.broken.items()}
    assert all(acc["pgd"][e] <= acc["fgsm"][e] for e in acc["pgd"]), acc
    assert acc["pgd"][0.3] < 0.5, f"PGD at eps=0.3 barely hurts the model: {acc}"


def test_unknown_attack_names_close_matches():
    with pytest.raises(CapsbenchError, match="did you mean 'pgd_adaptive'"):
        ATTACKS.get("pgd_adaptiv")


def test_autoattack_is_the_standard_version_with_a_fixed_seed():
    import torchattacks

    aa = ATTACKS.get("autoattack").build(LogitsAdapter(tiny_model()), 0.3, SETTINGS)
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
    for name in ATTACKS:
        attack = ATTACKS.get(name)
        assert attack.attacks and attack.budget(SETTINGS)
