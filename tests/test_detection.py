"""Reconstruction-based detection (Qin et al. 2020): the threshold's known answers, its false-positive rate on held-out
clean images, rejected decisions in the PGD engine, and the suite's detection records."""

from dataclasses import dataclass

import pytest
import torch
from conftest import make_splits
from test_models import tiny_args
from test_robustness import BandModel, measure

from capsbench import create_model
from capsbench.attacks import EngineSettings, run_attack
from capsbench.attacks.base import Pass, RowAttack
from capsbench.attacks.detector import distances, fit_detector, threshold_for
from capsbench.attacks.objectives import REJECTED, Objective
from capsbench.attacks.step_rules import SignStep
from capsbench.models.base import SoftmaxClassifier


@pytest.mark.parametrize("values, fpr, expected", [
    (range(1, 101), 0.05, 95.0),  # 5 of 100 strictly above
    (range(1, 11), 0.1, 9.0),
    (range(1, 11), 0.05, 10.0),  # 0.5 of 10 allowed: nothing may be flagged
    ([3, 3, 3, 3], 0.25, 3.0),  # ties: none strictly above
])
def test_threshold_flags_at_most_the_rate_on_the_images_it_was_set_on(values, fpr, expected):
    d = torch.tensor(list(values), dtype=torch.float).flip(0)
    assert threshold_for(d, fpr) == expected
    assert (d > expected).float().mean() <= fpr


def test_false_positive_rate_holds_on_held_out_clean_images():
    """Set on 1,000 clean images at 5 %, the rate on 4,000 others from the same distribution stays within sampling
    error (the threshold's own spread dominates: sd about 0.7 points)."""
    torch.manual_seed(0)
    model = create_model("capsnet", **tiny_args("capsnet")).eval()
    splits = make_splits(n_train=1, n_val=1000, n_test=4000)
    detector = fit_detector(model, splits.val_x, fpr=0.05, batch_size=500)
    held_out = detector.flags(model, splits.test_x, batch_size=500).float().mean().item()
    assert (
        detector.n == 1000
        and (distances(model, splits.val_x, batch_size=500) > detector.threshold).float().mean() <= 0.05
    )
    assert 0.028 <= held_out <= 0.072, held_out


class TwoClasses(SoftmaxClassifier):
    """Class 0's logit is the pixel sum, class 1's its negative: class 0 on every input in [0, 1]."""

    def class_logits(self, x):
        return torch.stack([x.flatten(1).sum(1), -x.flatten(1).sum(1)], dim=1)


@dataclass(frozen=True)
class _AlwaysRejected(Objective):
    """The model's logits, but every input is flagged."""

    def decided(self, out, x):
        return torch.full((len(x),), REJECTED)


class _Rejected(RowAttack):
    """Three sign steps on cross-entropy, no random start, against `objective`."""

    def __init__(self, objective: Objective) -> None:
        self.objective = objective

    def passes(self, eps, num_classes, norm="linf"):
        return [Pass(self.objective, "ce", SignStep(1.0), 3, random_start=False)]


def test_a_rejected_decision_never_counts_as_broken():
    images, labels = torch.rand(4, 1, 6, 6), torch.ones(4, dtype=torch.long)  # class 1: the model is always wrong
    model, settings = TwoClasses().eval(), EngineSettings(num_classes=2)
    assert run_attack(model, _Rejected(Objective()), images, labels, range(4), [0.3], settings).broken[0.3].all()
    result = run_attack(model, _Rejected(_AlwaysRejected()), images, labels, range(4), [0.3], settings)
    assert not result.broken[0.3].any()


def test_the_suite_reports_detection_for_decoder_models_and_skips_the_rest():
    torch.manual_seed(0)
    capsnet = create_model("capsnet", **tiny_args("capsnet")).eval()
    records = measure(
        capsnet, attack_args={"pgd_adaptive": {"steps": 3}, "pgd_detect_aware": {"steps": 3}},
        attacks=["fgsm", "pgd_adaptive"], ensemble=[], detection_fpr=0.1, detection_val_images=32,
    )
    cod = {(r["attack"], r["eps"]): r["value"] for r in records if r["metric"] == "correct_or_detected"}
    assert set(cod) == {(a, e) for a in ("fgsm", "pgd_adaptive", "pgd_detect_aware", "worst_case") for e in (0.25, 0.5)}
    for (attack, eps), v in cod.items():
        assert cod[("worst_case", eps)] <= v
    assert cod[("worst_case", 0.5)] <= cod[("worst_case", 0.25)]
    (fpr,) = [r for r in records if r["metric"] == "detection_false_positive_rate"]
    assert fpr["n"] == 48
    robust = {r["attack"] for r in records if r["metric"] == "robust_accuracy"}
    assert "pgd_detect_aware" not in robust  # its success criterion differs: it is not a plain robust accuracy

    plain = measure(BandModel(), attack_args={"pgd": {"steps": 3}}, attacks=["pgd"], ensemble=[], detection_fpr=0.1)
    (skip,) = [r for r in plain if r["metric"] == "attack_skipped"]
    assert skip["attack"] == "pgd_detect_aware" and "no reconstruction decoder" in skip["reason"]
    assert not [r for r in plain if r["metric"] == "correct_or_detected"]
