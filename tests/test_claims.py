"""Claims: the shipped claim files load, and synthetic records get the known verdict for each case (supported,
refuted, not resolved, no records) under each test (paired McNemar, Welch across seeds, ratio, exact count)."""

from __future__ import annotations

from pathlib import Path

import pytest
import report_fixtures as fixtures

from capsbench.errors import CapsbenchError
from capsbench.reporting.claim_files import Claim, Side, load_claims, load_claims_file
from capsbench.reporting.frame import records_frame
from capsbench.reporting.verdicts import NO_RECORDS, REFUTED, SUPPORTED, UNRESOLVED, Run, as_rows, judge
from capsbench.suites import SUITES


def claim(metric: str = "test_accuracy", suite: str = "accuracy", better: Side = Side("capsnet"),
          worse: Side = Side("cnn_sabour"), **kw) -> Claim:
    return Claim(id="c", statement="capsnet beats cnn_sabour", source="A. Author. Paper. 2017", where="Table 1",
                 suite=suite, dataset="mnist", metric=metric, better=better, worse=worse, **kw)


def run(records: list[dict], suite: str = "accuracy", budget: str = "smoke", **kw) -> Run:
    args = kw.pop("model_args", {"capsnet": {"routing_iterations": "3"}, "cnn_sabour": {}})
    return Run(records_frame(records, SUITES.get(suite)), args, kw.pop("settings", {}), budget)


def paired(capsnet_right: int, cnn_right: int, n: int = 10000) -> list[dict]:
    """One seed each on the same n images; the first k are right, so the discordant pairs are |k_a - k_b|."""
    return [fixtures.acc("accuracy", "capsnet", "test_accuracy", capsnet_right, n),
            fixtures.acc("accuracy", "cnn_sabour", "test_accuracy", cnn_right, n)]


def seeds(model: str, metric: str, values: list[float], suite: str = "accuracy", **columns) -> list[dict]:
    return [fixtures.value(suite, model, metric, v, seed=s, **columns) for s, v in enumerate(values)]


def test_paired_mcnemar_gives_each_verdict():
    assert judge(claim(), run(paired(9950, 9900))).verdict == SUPPORTED  # 50 discordant pairs, all for capsnet
    refuted = judge(claim(), run(paired(9900, 9950)))
    assert refuted.verdict == REFUTED and "McNemar on 10,000" in refuted.reason
    close = judge(claim(), run(paired(9905, 9900)))  # 5 discordant pairs: exact p = 2 / 2**5 = 0.0625
    assert close.verdict == UNRESOLVED and close.p == pytest.approx(0.0625)
    assert "budget=paper" in close.reason and "n = 10,000 images" in close.reason


def test_error_metric_direction_is_lower_is_better():
    records = [fixtures.acc("accuracy", "capsnet", "test_error", 9950, 10000, error=True),
               fixtures.acc("accuracy", "cnn_sabour", "test_error", 9900, 10000, error=True)]
    assert judge(claim("test_error"), run(records)).verdict == SUPPORTED
    assert judge(claim("test_error", better=Side("cnn_sabour"), worse=Side("capsnet")), run(records)).verdict == REFUTED


def test_welch_across_seeds_without_outcomes():
    apart = seeds("capsnet", "test_accuracy", [99.3, 99.4, 99.35]) + seeds(
        "cnn_sabour", "test_accuracy", [99.0, 99.05, 98.95]
    )
    assert judge(claim(), run(apart)).verdict == SUPPORTED
    assert judge(claim(better=Side("cnn_sabour"), worse=Side("capsnet")), run(apart)).verdict == REFUTED
    noisy = seeds("capsnet", "test_accuracy", [99.3, 98.9, 99.6]) + seeds(
        "cnn_sabour", "test_accuracy", [99.2, 99.4, 98.9]
    )
    assert judge(claim(), run(noisy)).verdict == UNRESOLVED
    single = seeds("capsnet", "test_accuracy", [99.3]) + seeds("cnn_sabour", "test_accuracy", [99.0])
    one = judge(claim(), run(single))
    assert one.verdict == UNRESOLVED and "seeds=[0,1,2]" in one.reason


def test_ratio_claim_on_latency_tests_the_factor():
    speed = claim(
        "latency", "efficiency", better=Side("cnn_sabour"), worse=Side("capsnet"), sweep={"batch": 1}, ratio=10
    )
    cnn = seeds("cnn_sabour", "latency", [1.0, 1.1, 0.9], "efficiency", batch=1)
    assert (
        judge(speed, run(cnn + seeds("capsnet", "latency", [20, 21, 19], "efficiency", batch=1), "efficiency")).verdict
        == SUPPORTED
    )
    assert (
        judge(speed, run(cnn + seeds("capsnet", "latency", [5, 5.2, 4.8], "efficiency", batch=1), "efficiency")).verdict
        == REFUTED
    )
    assert (
        judge(speed, run(cnn + seeds("capsnet", "latency", [3, 30, 8], "efficiency", batch=1), "efficiency")).verdict
        == UNRESOLVED
    )


def test_exact_counts_need_no_seeds():
    fewer = claim(
        "params", "efficiency", better=Side("effcapsnet"), worse=Side("capsnet"), sweep={"part": "total"}, ratio=10
    )
    records = seeds("effcapsnet", "params", [0.16], "efficiency", part="total") + seeds(
        "capsnet", "params", [6.8], "efficiency", part="total"
    )
    assert judge(fewer, run(records, "efficiency")).verdict == SUPPORTED
    close = seeds("effcapsnet", "params", [1.0], "efficiency", part="total") + seeds(
        "capsnet", "params", [6.8], "efficiency", part="total"
    )
    assert judge(fewer, run(close, "efficiency")).verdict == REFUTED  # 6.8x < 10x, and counts are exact


def test_no_records_says_what_is_missing():
    assert judge(claim(), None).verdict == NO_RECORDS
    missing = judge(claim(worse=Side("resnet56")), run(paired(9950, 9900)))
    assert missing.verdict == NO_RECORDS and "resnet56" in missing.reason
    r1 = judge(claim(better=Side("capsnet", model_args={"routing_iterations": 1})), run(paired(9950, 9900)))
    assert r1.verdict == NO_RECORDS and "routing_iterations=3" in r1.reason
    adv = judge(claim(better=Side("cnn_sabour", training="pgd"), worse=Side("capsnet")), run(paired(9900, 9950)))
    assert adv.verdict == NO_RECORDS and "cnn_sabour (training=pgd)" in adv.reason
    shift = judge(claim(better=Side("capsnet", settings={"data.max_shift": 0})), run(paired(9950, 9900)))
    assert shift.verdict == NO_RECORDS and "data.max_shift=None" in shift.reason


def test_a_side_trained_otherwise_is_read_from_its_own_rows():
    """An adversarially trained model's rows stand for a `training: pgd` side and never for the standard model."""
    records = [
        *paired(9900, 9950),
        {**fixtures.acc("accuracy", "cnn_sabour", "test_accuracy", 9990, 10000), "training": "pgd"},
    ]
    trained = judge(claim(better=Side("cnn_sabour", training="pgd"), worse=Side("capsnet")), run(records))
    assert trained.verdict == SUPPORTED and trained.better.mean == pytest.approx(99.9)
    standard = judge(claim(better=Side("cnn_sabour"), worse=Side("capsnet")), run(records))
    assert standard.verdict == SUPPORTED and standard.better.mean == 99.5


def test_a_side_may_read_another_metric_of_the_same_direction(tmp_path: Path):
    """The detection claim: a defended model's `correct_or_detected` against its undefended robust accuracy."""
    sweep = {"attack": "worst_case", "eps": 0.1}
    records = [
        fixtures.acc("robustness", "capsnet", "robust_accuracy", 300, 1000, **sweep),
        fixtures.acc("robustness", "capsnet", "correct_or_detected", 700, 1000, **sweep),
    ]
    c = claim(
        "robust_accuracy", "robustness", Side("capsnet", metric="correct_or_detected"), Side("capsnet"), sweep=sweep
    )
    j = judge(c, run(records, "robustness"))
    assert j.verdict == SUPPORTED and (j.better.mean, j.worse.mean) == (70.0, 30.0)
    path = tmp_path / "bad.yaml"
    path.write_text(
        "source: {id: x, citation: X}\nclaims:\n  - {id: a, statement: s, where: w, suite: robustness, "
        "dataset: mnist, metric: robust_accuracy, better: {model: capsnet, metric: detection_false_positive_rate}, "
        "worse: {model: capsnet}}\n"
    )
    with pytest.raises(CapsbenchError, match=r"'claims\[0\].better.metric' = 'detection_false_positive_rate' must be"):
        load_claims_file(path)


def test_undertrained_models_are_never_judged():
    records = [{**r, "undertrained": r["model"] == "cnn_sabour"} for r in paired(9950, 9900)]
    assert judge(claim(), run(records)).verdict == UNRESOLVED


def test_rows_show_published_and_measured_numbers():
    c = claim(better=Side("capsnet", published=99.75), worse=Side("cnn_sabour", published=99.61))
    row = as_rows([judge(c, run(paired(9950, 9900)))])[0]
    assert row["published"] == "99.75 vs 99.61"
    assert row["measured"] == "99.5 [99.3, 99.6] (n=10,000) vs 99 [98.8, 99.2] (n=10,000)"
    assert row["verdict"] == SUPPORTED and row["source"] == "A. Author. Paper. 2017, Table 1"


def test_shipped_claims_cover_the_issue():
    ids = {c.id for c in load_claims()}
    assert {
        "sabour2017-mnist-r3",
        "sabour2017-affnist",
        "hinton2018-smallnorb",
        "overview-mnist-r1",
        "overview-affnist-augmented",
        "overview-smallnorb-em",
        "overview-cifar10-resnet56",
        "overview-cifar10-resnet110",
        "overview-fgsm-capsnet",
        "overview-pgd-capsnet",
        "overview-fgsm-adversarial",
        "overview-pgd-adversarial",
        "overview-speed",
        "mazzia2021-params",
        "overview-reconstruction-detection",
    } <= ids


def test_a_malformed_claim_names_file_and_key(tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        "source: {id: x, citation: X}\nclaims:\n  - {id: a, statement: s, where: w, suite: accuracy, "
        "dataset: mnist, metric: test_acc, better: {model: capsnet}, worse: {model: cnn_sabour}}\n"
    )
    with pytest.raises(CapsbenchError, match=r"bad.yaml: 'claims\[0\].metric' = 'test_acc' is not a metric"):
        load_claims_file(path)
