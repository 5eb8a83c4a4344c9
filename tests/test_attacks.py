"""Attacks: the margin loss, eps=0 and projection known answers, the adapter's argmax, PGD vs FGSM, AutoAttack's settings."""

import pytest
import torch
import torchattacks
from test_models import tiny_args

from capsbench import create_model, list_models
from capsbench.attacks import AttackSettings, attack_target, build_attack, decisions, margin, worst_case
from capsbench.data import batches
from capsbench.errors import CapsbenchError
from capsbench.models.capsules import LOG_EPS
from conftest import make_splits

SETTINGS = AttackSettings(steps=10, step_ratio=2.5, restarts=1, square_queries=50, num_classes=10, seed=0)


def tiny_model(name: str = "cnn_sabour"):
    torch.manual_seed(0)
    return create_model(name, **tiny_args(name)).eval()


def test_margin_known_answer():
    logits = torch.tensor([[1.0, 3.0, 2.0], [5.0, -1.0, 0.5]])
    labels = torch.tensor([0, 0])
    assert torch.allclose(margin(logits, labels), torch.tensor([2.0, -4.5]))


@pytest.mark.parametrize("name", list_models())
def test_adapter_preserves_the_classifier_decision(name):
    model = tiny_model(name)
    x = torch.rand(16, 1, 28, 28)
    logits = attack_target(model)(x)
    assert logits.shape == (16, 10)
    assert torch.equal(logits.argmax(1), decisions(model, x))
    out = model(x)
    scores_are_lengths = out.poses is not None and out.poses.dim() == 3 and torch.allclose(out.poses.norm(dim=-1), out.scores)
    if scores_are_lengths:  # log-normalised lengths log(l / sum l), with an epsilon, never raw lengths
        lengths = out.scores
        expected = torch.log(lengths + LOG_EPS) - torch.log(lengths.sum(1, keepdim=True) + LOG_EPS)
        assert torch.allclose(logits, expected, atol=1e-5) and not torch.allclose(logits, lengths)


@pytest.mark.parametrize("attack", ["fgsm", "pgd", "pgd_margin"])
def test_eps_zero_returns_the_clean_images_exactly(attack):
    model = tiny_model()
    x, y = torch.rand(8, 1, 28, 28), torch.randint(0, 10, (8,))
    adv = build_attack(attack, attack_target(model), eps=0.0, settings=SETTINGS)(x, y)
    assert torch.equal(adv, x)


@pytest.mark.parametrize("attack", ["fgsm", "pgd", "pgd_margin", "square"])
def test_adversarial_images_stay_in_the_ball_and_in_range(attack):
    model = tiny_model()
    x = torch.rand(8, 1, 28, 28)
    y = decisions(model, x)  # Square only attacks images the model gets right
    adv = build_attack(attack, attack_target(model), eps=0.1, settings=SETTINGS)(x, y)
    assert (adv - x).abs().max() <= 0.1 + 1e-6
    assert adv.min() >= 0 and adv.max() <= 1
    if attack != "square":  # Square returns the clean image wherever it found no adversarial one
        assert (adv - x).abs().max() > 0.05


def test_restarts_only_replace_images_still_classified_correctly():
    model = tiny_model()
    x, y = torch.rand(16, 1, 28, 28), torch.randint(0, 10, (16,))
    calls = []

    class Recording(torchattacks.PGD):
        def forward(self, images, labels):
            calls.append(len(images))
            return super().forward(images, labels)

    torch.manual_seed(0)
    adv = worst_case(Recording(attack_target(model), eps=0.05, alpha=0.01, steps=2), model, x, y, restarts=3)
    assert calls[0] == 16 and all(n <= 16 for n in calls[1:])
    assert (adv - x).abs().max() <= 0.05 + 1e-6


def test_unknown_attack_names_close_matches():
    with pytest.raises(CapsbenchError, match="did you mean 'pgd_margin'"):
        build_attack("pgd_margn", attack_target(tiny_model()), eps=0.1, settings=SETTINGS)


def test_autoattack_is_the_standard_version_with_a_fixed_seed():
    aa = build_attack("autoattack", attack_target(tiny_model()), eps=0.3, settings=SETTINGS)
    apgd, apgdt, fab, square = aa.attacks
    assert (type(apgd), type(apgdt), type(fab), type(square)) == (
        torchattacks.APGD, torchattacks.APGDT, torchattacks.FAB, torchattacks.Square
    )
    assert apgd.steps == apgdt.steps == fab.steps == 100 and square.n_queries == 5000
    assert apgd.loss == "ce" and fab.multi_targeted and apgdt.n_target_classes == fab.n_target_classes == 9
    assert {a.seed for a in aa.attacks} == {0} and all(a.n_restarts == 1 for a in aa.attacks)
    assert all(a.eps == 0.3 and a.norm == "Linf" for a in aa.attacks)


def test_pgd_is_at_least_as_strong_as_fgsm_on_a_trained_model():
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
    assert (decisions(model, images) == labels).float().mean() > 0.9, "the tiny model did not learn the bands"
    target = attack_target(model)
    for eps in (0.1, 0.2, 0.3):
        torch.manual_seed(0)
        acc = {
            name: (decisions(model, build_attack(name, target, eps=eps, settings=SETTINGS)(images, labels)) == labels)
            .float().mean().item()
            for name in ("fgsm", "pgd", "pgd_margin")
        }
        assert acc["pgd"] <= acc["fgsm"] and acc["pgd_margin"] <= acc["fgsm"], (eps, acc)
    assert acc["pgd"] < 0.5, f"PGD at eps=0.3 barely hurts the model: {acc}"
