"""APGD and its losses against known answers: DLR and targeted DLR on hand-made logits (and their invariance to the
logits' scale), the paper's checkpoints, the step rule's halving conditions and momentum (APGDStep on one row, as the
row engine drives it), a targeted pass reaching its target on a linear model through the row engine, and the
attacks' budget lines."""

import math

import pytest
import torch

from capsbench.attacks import EngineSettings, build, decisions, run_attack
from capsbench.attacks.base import Pass, RowAttack
from capsbench.attacks.engine import CORE, DTYPES
from capsbench.attacks.losses import dlr, targeted_dlr
from capsbench.attacks.objectives import RawEvidenceObjective
from capsbench.attacks.step_rules import APGDStep, checkpoints, mark_table, state_fields
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


def one_row(clean: float = 0.5, eps: float = 0.1, steps: int = 100) -> tuple[APGDStep, dict[str, torch.Tensor]]:
    """APGDStep's state for one one-pixel row at `clean`, started as the engine starts a row (no random start)."""
    rule = APGDStep()
    fields = {**CORE, **state_fields([rule])}
    s = {name: torch.zeros((1, 1, 1, 1) if kind == "image" else (1,),
                           dtype=torch.float32 if kind == "image" else DTYPES[kind]) for name, kind in fields.items()}
    s["x"].fill_(clean)
    s["lower"].fill_(max(clean - eps, 0.0))
    s["upper"].fill_(min(clean + eps, 1.0))
    s["eps"].fill_(eps)
    s["steps"].fill_(steps)
    s["mark_table"] = mark_table([steps], torch.device("cpu"))
    rule.start(s, s["eps"], s["steps"].float())
    return rule, s


def run_schedule(values, steps=100, gradients=None):
    """Feed one row's loss at iterates 0..len(values)-1 to APGDStep, as the engine does (x moves to what advance
    returns, t counts up); the iterates at which its eta halved, eta at the end, and the iterates x(0), x(1), ..."""
    rule, s = one_row(steps=steps)
    halved, xs = [], [s["x"].item()]
    for t, f in enumerate(values):
        s["t"].fill_(t)
        before = s["eta"].clone()
        g = torch.full_like(s["x"], 1.0 if gradients is None else gradients[t])
        s["x"] = rule.advance(s, torch.tensor([float(f)]), g)
        xs.append(s["x"].item())
        if s["eta"] < before:
            halved.append(t)
    return halved, s["eta"].item(), xs


def test_a_loss_that_never_rises_halves_the_step_at_every_checkpoint():
    halved, eta, _ = run_schedule([0.0] * 100)
    assert halved == checkpoints(100) and math.isclose(eta, 0.2 / 2**8, rel_tol=1e-6)


def test_a_loss_that_always_rises_keeps_the_step():
    halved, eta, _ = run_schedule(range(100))
    assert halved == [] and eta == pytest.approx(0.2)


def test_condition_one_halves_after_a_window_without_rises():
    halved, _, _ = run_schedule([min(t, 22) + (t - 41 if t > 41 else 0) for t in range(100)])
    assert halved == [41]  # flat from 23 to 41: no rise in that window; rising everywhere else


def test_condition_two_halves_when_the_best_loss_stalls_without_a_halving():
    # f drops at iterate 1 and then rises at every step, never back to f(0): the best loss stays f(0)
    halved, _, _ = run_schedule([0.0] + [-100.0 + 0.1 * t for t in range(1, 100)])
    assert halved == [41, 70, 87, 99]  # never at the first checkpoint; never right after a halving


def test_the_step_has_momentum_after_the_first():
    """eta = 2 eps = 0.2 from 0.5 in the box [0.4, 0.6]: x(1) = P(0.5 + 0.2) = 0.6 (alpha 1); the gradient turns, so
    z = 0.4 and x(2) = 0.6 + 0.75 (0.4 - 0.6) + 0.25 (0.6 - 0.5) = 0.475."""
    _, _, xs = run_schedule([0.0, 1.0], gradients=[1.0, -1.0])
    assert xs == pytest.approx([0.5, 0.6, 0.475], abs=1e-6)


def test_a_halving_goes_on_from_the_best_point():
    """A flat loss: the best point stays x(0) = 0.5 while a rising gradient takes x to the box's edge 0.6; at the first
    checkpoint (22) eta halves to 0.1 and the row steps from 0.5: 0.5 + 0.75 (0.6 - 0.5) + 0.25 (0.5 - 0.6) = 0.55."""
    _, _, xs = run_schedule([0.0] * 23)
    assert xs[22] == pytest.approx(0.6) and xs[23] == pytest.approx(0.55)


class Linear(SoftmaxClassifier):
    """Four classes, class k's logit is pixel k: (B, 1, 2, 2) -> (B, 4)."""

    def class_logits(self, x):
        return x.flatten(1)


class OnePass(RowAttack):
    """One APGD pass on the raw evidence, no random start: the row engine's APGD on its own."""

    name = "one_pass"

    def __init__(self, loss: str, target: int = 0) -> None:
        self.loss, self.target = loss, target

    def passes(self, eps, num_classes, norm="linf"):
        return [Pass(RawEvidenceObjective(), self.loss, APGDStep(), 20, target=self.target, random_start=False)]


def test_a_targeted_pass_reaches_its_target_on_a_linear_model():
    model = Linear().eval()
    x = torch.tensor([0.9, 0.5, 0.45, 0.4]).view(1, 1, 2, 2)
    y = torch.tensor([0])  # the least likely class, ranked 3rd of the others: x3 up to 0.7, x0 down to 0.6
    result = run_attack(model, OnePass("targeted_dlr", target=3), x, y, [0], [0.3], EngineSettings(num_classes=4))
    adv = result.adversarial[0.3]
    assert result.broken[0.3].item() and decisions(model, adv).item() == 3
    assert (adv - x).abs().max() <= 0.3 + 1e-6


def test_the_untargeted_pass_on_a_linear_model_finds_the_boundary_and_stops_short_of_it_at_a_small_eps():
    model = Linear().eval()
    x = torch.tensor([0.9, 0.5, 0.45, 0.4]).view(1, 1, 2, 2)
    y = torch.tensor([0])
    eps = [0.21, 0.19]  # the margin 0.4 needs eps > 0.2 (x0 down and x1 up by eps each)
    result = run_attack(model, OnePass("dlr"), x, y, [0], eps, EngineSettings(num_classes=4))
    assert [result.broken[e].item() for e in eps] == [True, False]


def test_the_attacks_state_their_budget():
    assert build("apgd", {"steps": 25}).budget(10) == "APGD, margin loss, 25 steps, 1 restart(s)"
    assert "3 likeliest classes, 25 steps each" in build("apgd_targeted", {"steps": 25, "targets": 3}).budget(10)
    every = build("apgd_targeted", {"steps": 25})
    assert "towards each of the 9 other classes, 25 steps each" in every.budget(10)
    longer = build("apgd", {"steps": 25, "long_steps": 100, "long_eps": 0.15})
    assert longer.budget(10).endswith("; 100 steps at eps >= 0.15")
    assert [p.steps for e in (0.1, 0.15) for p in longer.passes(e, 10)] == [25, 100]
