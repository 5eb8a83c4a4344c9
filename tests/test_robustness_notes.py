"""What the robustness tables say ran is read from the records: the sanity checks named as passed and the flags'
legend list only the checks the records hold, and the budgets name only the attacks that ran, in their order."""

from __future__ import annotations

import report_fixtures as fixtures
from omegaconf import OmegaConf

from capsbench.suites.robustness.params import RobustnessParams
from capsbench.suites.robustness.suite import RobustnessSuite


def test_the_checks_named_as_passed_are_the_checks_that_ran():
    params = OmegaConf.structured(RobustnessParams())
    records = [r for r in fixtures.robustness_default() if r["model"] == "cnn_9x9"]  # no check fires on it
    (passed,) = [n for n in RobustnessSuite().notes(records, params) if n.startswith("sanity checks passed")]
    assert "adaptive_stronger" not in passed and "near_zero_at_max_eps" in passed  # no capsule pass: not checked
    ran = records + [{**records[0], "metric": "sanity_flag", "value": 0.0, "check": "adaptive_stronger"}]
    (passed,) = [n for n in RobustnessSuite().notes(ran, params) if n.startswith("sanity checks passed")]
    assert "adaptive_stronger" in passed


def test_the_budget_lines_name_the_attacks_that_ran_in_their_order():
    params = OmegaConf.structured(RobustnessParams(attacks=["fgsm", "apgd"], ensemble=["apgd_targeted", "square"]))
    records = [r for r in fixtures.robustness() if r.get("attack") not in ("pgd_adaptive", "vote")]
    lines = [n for n in RobustnessSuite().notes(records, params) if n.startswith("budget on capsnet")]
    assert lines and "pgd_adaptive" not in lines[0] and lines[0].index("fgsm") < lines[0].index("apgd_targeted")


def test_a_check_that_ran_for_some_models_only_is_named_with_them():
    params = OmegaConf.structured(RobustnessParams())
    cnn = [r for r in fixtures.robustness_default() if r["model"] == "cnn_9x9"]
    caps = [{**r, "model": "capsnet"} for r in cnn]
    caps.append({**caps[0], "metric": "sanity_flag", "value": 0.0, "check": "adaptive_stronger"})
    (passed,) = [n for n in RobustnessSuite().notes(cnn + caps, params) if n.startswith("sanity checks passed")]
    every, _, rest = passed.partition(";")
    assert "near_zero_at_max_eps" in every and "adaptive_stronger" not in every
    assert rest.strip() == "adaptive_stronger, which ran for capsnet only"
