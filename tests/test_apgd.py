"""APGD and its losses against known answers: DLR and targeted DLR on hand-made logits (and their invariance to the
logits' scale), the paper's checkpoints, the step-size halving conditions, a targeted pass reaching its target on a
linear model, and the ensemble's budget lines."""

import dataclasses
import math

import pytest
import torch

from capsbench.attacks import ATTACKS, AttackSettings, decisions
from capsbench.attacks.apgd import StepSize, apgd_rows, checkpoints
from capsbench.attacks.losses import dlr, targeted_dlr
from capsbench.attacks.objectives import RawEvidenceObjective
from capsbench.models.base import SoftmaxClassifier

LOGITS = torch.tensor([[1.0, 4.0, 2.0, 3.0], [1.0, 4.0, 2.0, 3.0]])


def test_dlr_known_answer_and_invariance():
    labels = torch.tensor([0, 1])
    # label 0: -(1 - 4) / (4 - 2); label 1 (the top class): -(4 - 3) / (4 - 2)
    assert torch.allclose(dlr(LOGITS, labels), torch.tensor([1.5, -0.5]))
    assert torch.allclose(dlr(7.0 * LOGITS - 3.0, labels), dlr(LOGITS, labels))


def test_targeted_dlr_known_answer_and_invariance():
    labels, targets = torch.tensor([1, 0]), torch.tensor([0, 3])
    # -(z_y - z_t) / (z_pi1 - (z_pi3 + z_pi4) / 2), sorted 4, 3, 2, 1: the denominator is 4 - 1.5 = 2.5
    assert torch.allclose(targeted_dlr(LOGITS, labels, targets), torch.tensor([-3.0 / 2.5, 2.0 / 2.5]))
    assert torch.allclose(targeted_dlr(0.5 * LOGITS + 1.0, labels, targets), targeted_dlr(LOGITS, labels, targets))


def test_checkpoints_are_the_papers():
    assert checkpoints(100) == [22, 41, 57, 70, 80, 87, 93, 99]
    assert checkpoints(50) == [11, 21, 29, 35, 40, 44, 47]  # ceil(p_j * 50)
    assert all(0 < w < n for n in (1, 5, 10, 25) for w in checkpoints(n))


def run_schedule(values, steps=100):
    """Feed one row's loss at iterates 0..steps-1 to StepSize; the iterates at which its eta halved, and eta."""
    control = StepSize(torch.tensor([0.1]), steps)
    halved = []
    for t, f in enumerate(values):
        _, halve = control.observe(t, torch.tensor([0]), torch.tensor([float(f)]))
        if len(halve):
            halved.append(t)
    return halved, control.eta.item()


def test_a_loss_that_never_rises_halves_the_step_at_every_checkpoint():
    halved, eta = run_schedule([0.0] * 100)
    assert halved == checkpoints(100) and math.isclose(eta, 0.2 / 2**8, rel_tol=1e-6)


def test_a_loss_that_always_rises_keeps_the_step():
    assert run_schedule(range(100)) == ([], pytest.approx(0.2))


def test_condition_one_halves_after_a_window_without_rises():
    halved, _ = run_schedule([min(t, 22) + (t - 41 if t > 41 else 0) for t in range(100)])
    assert halved == [41]  # flat from 23 to 41: no rise in that window; rising everywhere else


def test_condition_two_halves_when_the_best_loss_stalls_without_a_halving():
    # f drops at iterate 1 and then rises at every step, never back to f(0): the best loss stays f(0)
    halved, _ = run_schedule([0.0] + [-100.0 + 0.1 * t for t in range(1, 100)])
    assert halved == [41, 70, 87, 99]  # never at the first checkpoint; never right after a halving


class Linear(SoftmaxClassifier):
    """Four classes, class k's logit is pixel k: (B, 1, 2, 2) -> (B, 4)."""

    def class_logits(self, x):
        return x.flatten(1)


def test_a_targeted_pass_reaches_its_target_on_a_linear_model():
    model = Linear().eval()
    x = torch.tensor([0.9, 0.5, 0.45, 0.4]).view(1, 1, 2, 2)
    y, target = torch.tensor([0]), torch.tensor([3])  # the least likely class: x3 up to 0.7, x0 down to 0.6
    broken, adv = apgd_rows(RawEvidenceObjective(model), x, y, torch.tensor([0.3]), steps=20, loss="targeted_dlr",
                            noise=None, targets=target)
    assert broken.item() and decisions(model, adv).item() == 3
    assert (adv - x).abs().max() <= 0.3 + 1e-6


def test_the_untargeted_pass_on_a_linear_model_finds_the_boundary_and_stops_short_of_it_at_a_small_eps():
    model = Linear().eval()
    x = torch.tensor([0.9, 0.5, 0.45, 0.4]).view(1, 1, 2, 2)
    y = torch.tensor([0])
    eps = torch.tensor([0.21, 0.19])  # the margin 0.4 needs eps > 0.2 (x0 down and x1 up by eps each)
    broken, _ = apgd_rows(RawEvidenceObjective(model), x.expand(2, -1, -1, -1), y.expand(2), eps, steps=20,
                          loss="dlr", noise=None)
    assert broken.tolist() == [True, False]


def test_the_ensemble_states_its_budget():
    settings = AttackSettings(steps=10, step_ratio=2.5, restarts=1, square_queries=50, num_classes=10, seed=0,
                              apgd_steps=25, apgd_targets=3)
    assert ATTACKS.get("apgd").budget(settings) == "APGD, margin loss, 25 steps, 1 restart(s)"
    assert "3 likeliest classes, 25 steps each" in ATTACKS.get("apgd_targeted").budget(settings)
    every = dataclasses.replace(settings, apgd_targets=None)
    assert "towards each of the 9 other classes, 25 steps each" in ATTACKS.get("apgd_targeted").budget(every)
