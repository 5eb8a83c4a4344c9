"""Claims: the shipped claim files load, and synthetic records get the known verdict for each case (supported,
refuted, not resolved, protocol not met, no records) under each test (per-seed direction with the t-test on per-seed
differences and pooled McNemar, Welch, ratio, exact count) and each protocol check."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
import report_fixtures as fixtures
from typer.testing import CliRunner

from capsbench.cli import app
from capsbench.errors import CapsbenchError
from capsbench.reporting.claim_files import Check, Claim, Side, load_claims, load_claims_file
from capsbench.reporting.claim_tests import Evidence
from capsbench.reporting.frame import records_frame
from capsbench.reporting.verdicts import (
    DIFFERS,
    NO_RECORDS,
    PROTOCOL_NOT_MET,
    REFUTED,
    REPRODUCED,
    SUPPORTED,
    UNRESOLVED,
    Run,
    as_rows,
    describe,
    judge,
    judge_claim,
    printed_match,
    render_markdown,
    verdict_cell,
)
from capsbench.suites import SUITES


def claim(metric: str = "test_accuracy", suite: str = "accuracy", better: Side = Side("capsnet"),
          worse: Side = Side("cnn_sabour"), **kw) -> Claim:
    return Claim(id="c", statement="capsnet beats cnn_sabour", source="A. Author. Paper. 2017", where="Table 1",
                 suite=suite, dataset="mnist", metric=metric, better=better, worse=worse, **kw)


def run(records: list[dict], suite: str = "accuracy", budget: str = "quick", **kw) -> Run:
    args = kw.pop("model_args", {"capsnet": {"routing_iterations": "3"}, "cnn_sabour": {}})
    return Run(records_frame(records, SUITES.get(suite)), args, kw.pop("settings", {}), budget)


def paired(capsnet_right: int, cnn_right: int, n: int = 10000) -> list[dict]:
    """One seed each on the same n images; the first k are right, so the discordant pairs are |k_a - k_b|."""
    return [fixtures.acc("accuracy", "capsnet", "test_accuracy", capsnet_right, n),
            fixtures.acc("accuracy", "cnn_sabour", "test_accuracy", cnn_right, n)]


def seeds(model: str, metric: str, values: list[float], suite: str = "accuracy", **columns) -> list[dict]:
    return [fixtures.value(suite, model, metric, v, seed=s, **columns) for s, v in enumerate(values)]


def per_seed(capsnet: list[int], cnn: list[int], n: int = 10000, metric: str = "test_accuracy") -> list[dict]:
    """Seed s: capsnet gets the first capsnet[s] of n images right, cnn_sabour the first cnn[s]."""
    return [fixtures.acc("accuracy", model, metric, right, n, seed=s, error=metric == "test_error")
            for model, rights in (("capsnet", capsnet), ("cnn_sabour", cnn)) for s, right in enumerate(rights)]


def test_one_seed_is_at_most_not_resolved_unless_asked():
    one = judge(claim(), run(paired(9950, 9900)))  # 50 discordant pairs, all for capsnet: McNemar p ~ 2e-12
    assert one.verdict == UNRESOLVED and "one seed" in one.reason and one.p < 1e-10
    assert one.needs.startswith("seeds=[0,1,2]") and as_rows([one])[0]["cell"] == "not resolved (quick, one seed)"
    asked = judge(claim(), run(paired(9950, 9900)), one_seed=True)
    assert asked.verdict == SUPPORTED and "one_seed_verdicts=true" in asked.reason
    assert as_rows([asked])[0]["cell"] == "supported (quick, one seed)"
    refuted = judge(claim(), run(paired(9900, 9950)), one_seed=True)
    assert refuted.verdict == REFUTED and "McNemar on 10,000" in refuted.reason
    close = judge(claim(), run(paired(9905, 9900)), one_seed=True)  # 5 discordant pairs: exact p = 2 / 2**5
    assert close.verdict == UNRESOLVED and close.p == pytest.approx(0.0625) and "budget=paper" in close.needs


def test_three_seeds_agreeing_in_direction_support_the_claim():
    agree = judge(claim(), run(per_seed([9950, 9945, 9955], [9900, 9910, 9895])))
    assert agree.verdict == SUPPORTED and agree.seeds == 3 and agree.needs == ""
    assert "ahead in all 3 seeds" in agree.reason and "clustered McNemar on 10,000 distinct test images" in agree.reason
    assert as_rows([agree])[0]["cell"] == "supported (quick, 3 seeds)"
    flipped = judge(claim(better=Side("cnn_sabour"), worse=Side("capsnet")),
                    run(per_seed([9950, 9945, 9955], [9900, 9910, 9895])))
    assert flipped.verdict == REFUTED


def test_three_seeds_disagreeing_in_direction_give_no_verdict():
    """Pooled over seeds the images favour capsnet by 100 discordant pairs (McNemar p ~ 1e-23), and two seeds of three
    do too, but the third goes the other way: no supported or refuted verdict."""
    mixed = judge(claim(), run(per_seed([9990, 9990, 9880], [9900, 9900, 9920])))
    assert mixed.verdict == UNRESOLVED and mixed.needs == "more seeds"
    assert "direction differs between seeds (capsnet ahead in seed(s) 0, 1, behind in 2)" in mixed.reason
    assert judge(claim(), run(per_seed([9990, 9990, 9880], [9900, 9900, 9920])), one_seed=True).verdict == UNRESOLVED


def test_same_direction_needs_the_seed_test_too():
    """Every seed favours capsnet, but by 1, 2 and 60 images: the per-seed differences are too spread for 3 seeds."""
    spread = judge(claim(), run(per_seed([9901, 9902, 9960], [9900, 9900, 9900])))
    assert spread.verdict == UNRESOLVED and "not both p < 0.05" in spread.reason and spread.needs.startswith("more")


def test_error_metric_direction_is_lower_is_better():
    records = per_seed([9950, 9945, 9955], [9900, 9910, 9895], metric="test_error")
    assert judge(claim("test_error"), run(records)).verdict == SUPPORTED
    assert judge(claim("test_error", better=Side("cnn_sabour"), worse=Side("capsnet")), run(records)).verdict == REFUTED


def test_seeds_without_outcomes_use_the_per_seed_differences():
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
    assert one.verdict == UNRESOLVED and "not testable" in one.reason and one.needs == "seeds=[0,1,2]"
    unpaired = seeds("capsnet", "test_accuracy", [99.3, 99.4, 99.35]) + [
        fixtures.value("accuracy", "cnn_sabour", "test_accuracy", v, seed=s)
        for s, v in ((5, 99.0), (6, 99.05), (7, 98.95))
    ]
    welch = judge(claim(), run(unpaired))
    assert welch.verdict == SUPPORTED and "Welch" in welch.reason


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


def test_exact_counts_are_reproduced_or_differ_whatever_the_seeds():
    fewer = claim("params", "efficiency", better=Side("effcapsnet", published=0.161),
                  worse=Side("capsnet", published=6.8), sweep={"part": "total"}, ratio=40)
    records = seeds("effcapsnet", "params", [0.161824] * 3, "efficiency", part="total") + seeds(
        "capsnet", "params", [6.8058] * 3, "efficiency", part="total"
    )
    judged = judge(fewer, run(records, "efficiency"))
    assert judged.verdict == REPRODUCED and judged.seeds == 0 and verdict_cell(judged) == "reproduced (quick)"
    bigger = seeds("effcapsnet", "params", [0.1621], "efficiency", part="total") + seeds(
        "capsnet", "params", [6.8058], "efficiency", part="total"
    )
    differs = judge(fewer, run(bigger, "efficiency"))
    assert differs.verdict == DIFFERS and "effcapsnet counts 0.1621, printed 0.161" in differs.reason
    close = seeds("effcapsnet", "params", [1.0], "efficiency", part="total") + seeds(
        "capsnet", "params", [6.8], "efficiency", part="total"
    )
    assert "does not hold" in judge(replace(fewer, better=Side("effcapsnet")), run(close, "efficiency")).reason


def test_printed_precision():
    assert printed_match(6.8058, 6.8) and printed_match(6.86, 6.8) and not printed_match(6.9, 6.8)
    assert printed_match(0.161824, 0.161) and printed_match(0.161824, 0.162) and not printed_match(0.1635, 0.161)


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
    trained = judge(claim(better=Side("cnn_sabour", training="pgd"), worse=Side("capsnet")), run(records), True)
    assert trained.verdict == SUPPORTED and trained.better.mean == pytest.approx(99.9)
    standard = judge(claim(better=Side("cnn_sabour"), worse=Side("capsnet")), run(records), True)
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
    j = judge(c, run(records, "robustness"), one_seed=True)
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
    undertrained = judge(claim(), run(records), one_seed=True)
    assert undertrained.verdict == UNRESOLVED and "cnn_sabour is undertrained" in undertrained.reason


def test_a_smoke_run_never_yields_a_verdict():
    """Whatever the numbers, seeds or one_seed_verdicts: smoke records are judged "protocol not met"."""
    for records in (paired(9950, 9900), per_seed([9950, 9945, 9955], [9900, 9910, 9895])):
        smoke = judge(claim(), run(records, budget="smoke"), one_seed=True)
        assert smoke.verdict == PROTOCOL_NOT_MET and "budget=smoke" in smoke.reason
        assert smoke.needs == "budget=quick or budget=paper" and as_rows([smoke])[0]["cell"].startswith(
            "protocol not met (smoke, "
        )
    assert judge(claim(worse=Side("resnet56")), run(paired(9950, 9900), budget="smoke")).verdict == NO_RECORDS


def test_a_claim_whose_protocol_check_fails_is_protocol_not_met():
    """Both models must reach 99.2 % (the affNIST claim's matched accuracy): 99.5 and 99.0 % fail on the CNN, with the
    number that missed in the reason; at 99.0 % both pass and the seed rule decides."""
    matched = Check("both models at the paper's MNIST accuracy", "at_least", 99.2, needs="train.target_val_accuracy")
    records = per_seed([9950, 9945, 9955], [9900, 9910, 9895])
    missed = judge(claim(checks=(matched,)), run(records))
    assert missed.verdict == PROTOCOL_NOT_MET and missed.seeds == 3 and missed.needs == "train.target_val_accuracy"
    assert ("cnn_sabour test_accuracy 99.02 (mean of 3 seeds) < 99.2, within noise (±0.19 points on 10,000 distinct "
            "images): the check cannot tell these models apart: both models at the paper's") in missed.reason
    assert "capsnet" not in missed.reason.split(";")[0].split(" test_accuracy")[0]
    met = Check("both models at 99 %", "at_least", 99.0)
    assert judge(claim(checks=(met,)), run(records)).verdict == SUPPORTED


def test_checks_on_another_metric_the_published_number_and_the_budget():
    clean = Check("models trained to 99 %", "at_least", 99.0, sides=("worse",), metric="test_accuracy")
    errors = per_seed([9950, 9945, 9955], [9800, 9810, 9795], metric="test_error") + per_seed(
        [9950, 9945, 9955], [9800, 9810, 9795]
    )
    low = judge(claim("test_error", checks=(clean,)), run(errors))
    assert low.verdict == PROTOCOL_NOT_MET and "cnn_sabour test_accuracy 98.02" in low.reason
    near = Check("within 0.3 points of the published error", "near_published", 0.3)
    published = claim("test_error", better=Side("capsnet", published=0.25), worse=Side("cnn_sabour", published=0.39),
                      checks=(near,))
    far = judge(published, run(errors))
    assert far.verdict == PROTOCOL_NOT_MET
    assert "cnn_sabour test_error 1.983 (mean of 3 seeds) is 1.59 from" in far.reason
    assert "capsnet test_error" not in far.reason  # its mean error 0.5 is 0.25 from the published 0.25: within 0.3
    paper = Check("the published model sizes", "budget", "paper")
    quick = judge(claim("test_error", checks=(paper,)), run(errors))
    assert quick.verdict == PROTOCOL_NOT_MET and quick.reason == "measured at budget=quick; the published model sizes"
    assert quick.needs == "budget=paper"
    assert judge(claim("test_error", checks=(paper,)), run(errors, budget="paper")).verdict == SUPPORTED


def test_a_standard_side_measured_only_trained_otherwise_misses_the_protocol():
    records = [{**r, "training": "pgd"} if r["model"] == "cnn_sabour" else r for r in paired(9900, 9950)]
    j = judge(claim(), run(records))
    assert j.verdict == PROTOCOL_NOT_MET and "cnn_sabour was measured only as cnn_sabour (training=pgd)" in j.reason


def test_the_table_has_the_budget_in_every_verdict_and_what_each_needs_next():
    judged = [
        judge(claim(), run(per_seed([9950, 9945, 9955], [9900, 9910, 9895]))),
        judge(claim(), run(paired(9950, 9900))),
        judge(claim(worse=Side("resnet56")), run(paired(9950, 9900))),
    ]
    table = render_markdown(judged)
    assert "| verdict | needs next | why |" in table
    assert "| **supported** (quick, 3 seeds) | – |" in table
    assert "| **not resolved** (quick, one seed) | seeds=[0,1,2] |" in table
    assert "| **no records** (quick) | capsbench run suite=claims claims=[c] |" in table


def test_rows_show_published_and_measured_numbers():
    c = claim(better=Side("capsnet", published=99.75), worse=Side("cnn_sabour", published=99.61))
    row = as_rows([judge(c, run(paired(9950, 9900)), one_seed=True)])[0]
    assert row["published"] == "99.75 vs 99.61"
    assert row["measured"] == "99.5 [99.3, 99.6] (n=10,000) vs 99 [98.8, 99.2] (n=10,000)"
    assert row["verdict"] == SUPPORTED and row["source"] == "A. Author. Paper. 2017, Table 1"


def test_every_shipped_claim_has_a_primary_source_or_the_no_primary_source_label():
    claims = load_claims()
    ids = {c.id for c in claims}
    assert {"sabour2017-mnist-r3", "sabour2017-params", "hinton2018-smallnorb", "mazzia2021-params",
            "gu2021-vote-mnist", "marchisio2023-worst-case", "qin2020-reconstructive-attack", "michels2019-mnist",
            "mazzia2021-smallnorb-params", "circulated-fgsm-capsnet"} <= ids
    assert "gu2021-pgd" not in ids and "qin2020-detection" not in ids  # put words in a paper's mouth; could not fail
    for claim in claims:
        if claim.primary:  # a paper: its citation with an arXiv / OpenReview reference, and where in it
            assert "arXiv:" in claim.source or "OpenReview" in claim.source, claim.id
            assert claim.where and claim.where != "comparison table", claim.id
        else:
            assert "no paper prints" in claim.unsourced and claim.id.startswith("circulated-"), claim.id
    assert not any(c.primary for c in claims if c.id.startswith("circulated-"))



def test_a_malformed_claim_names_file_and_key(tmp_path: Path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        "source: {id: x, citation: X}\nclaims:\n  - {id: a, statement: s, where: w, suite: accuracy, "
        "dataset: mnist, metric: test_acc, better: {model: capsnet}, worse: {model: cnn_sabour}}\n"
    )
    with pytest.raises(CapsbenchError, match=r"bad.yaml, claim a: 'claims\[0\].metric' = 'test_acc' is not a metric"):
        load_claims_file(path)


EPS_7 = ("source: {id: x, citation: X}\nclaims:\n  - {id: big-eps, statement: s, where: w, suite: robustness, "
         "dataset: mnist, metric: robust_accuracy, sweep: {attack: fgsm, eps: 7}, better: {model: capsnet}, "
         "worse: {model: cnn_sabour}}\n")
EPS_7_SAID = r"bad.yaml, claim big-eps: 'claims\[0\].sweep.eps' = 7 must be an L-inf radius in \[0, 1\]"


def test_a_sweep_value_no_run_can_measure_names_the_file_and_the_claim(tmp_path: Path):
    (tmp_path / "bad.yaml").write_text(EPS_7)
    with pytest.raises(CapsbenchError, match=EPS_7_SAID):
        load_claims_file(tmp_path / "bad.yaml")


def test_run_suite_claims_refuses_such_a_claims_file_before_work(tmp_path: Path):
    """Not as a params.eps the user never set: the claims file and claim, exit 2, nothing written."""
    (tmp_path / "baselines" / "claims").mkdir(parents=True)
    (tmp_path / "baselines" / "claims" / "bad.yaml").write_text(EPS_7)
    result = CliRunner().invoke(app, ["run", "suite=claims", "budget=smoke", "claims=[big-eps]", "device=cpu",
                                      f"baselines_dir={tmp_path / 'baselines'}", f"output_dir={tmp_path / 'out'}"])
    assert result.exit_code == 2 and re.search(EPS_7_SAID, result.output), result.output
    assert len(result.output.splitlines()) == 1 and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "check,message",
    [
        ("{what: w, at_least: 99, at_most: 100}", r"needs exactly one of at_least, at_most, near_published, budget"),
        ("{at_least: 99}", r"must be a mapping with 'what'"),
        ("{what: w, near_published: 1.0}", r"give each of \('better', 'worse'\) `published`"),
        ("{what: w, at_least: 99, metric: clean_acc}", r"checks\[0\].metric' = 'clean_acc' is not a metric"),
        ("{what: w, budget: 3}", r"'claims\[0\].checks\[0\].budget' has the wrong type"),
    ],
)
def test_a_malformed_check_names_file_and_key(tmp_path: Path, check, message):
    path = tmp_path / "bad.yaml"
    path.write_text(
        "source: {id: x, citation: X}\nclaims:\n  - {id: a, statement: s, where: w, suite: accuracy, "
        f"dataset: mnist, metric: test_error, better: {{model: capsnet}}, worse: {{model: cnn_sabour}}, "
        f"checks: [{check}]}}\n"
    )
    with pytest.raises(CapsbenchError, match=message):
        load_claims_file(path)


def test_shipped_claims_declare_their_protocol():
    """Every shipped claim declares what its published numbers assume, beyond the rule that smoke judges nothing."""
    claims = {c.id: c for c in load_claims()}
    assert all(c.checks for c in claims.values())
    assert claims["sabour2017-affnist"].checks[0].metric == "centred_accuracy" and claims["sabour2017-affnist"].data
    assert claims["circulated-speed"].checks[0].kind == "budget"
    assert claims["sabour2017-multimnist"].checks[0].value == 2
    assert claims["qin2020-reconstructive-attack"].run == {"params.detection_fpr": 0.05}
    assert claims["circulated-affnist-augmented"].relation == "parity"  # the table prints 79 = 79
    assert claims["circulated-worst-case-capsnet"].better.published is None  # the table prints no worst case
    assert claims["sabour2017-affnist"].worse.model == "cnn_9x9"  # "a similar number of parameters"
    assert {"marchisio2023-routing", "gu2021-detection-aware-mnist", "hinton2018-black-box"} <= set(claims)
    assert claims["hinton2018-black-box"].relation == "parity" and claims["marchisio2023-routing"].margin == 5.0
    assert claims["mazzia2021-smallnorb-params"].better.model_args["kernels"] == [7, 3, 3, 3]


def test_a_side_measured_on_another_model_than_the_source_s_misses_the_protocol():
    """The vote claim on CIFAR-10 names Gu et al.'s ResNet-18 CapsNet: Sabour et al.'s capsnet, at any budget, does
    not stand for it."""
    gu = Check("the paper's ResNet-18 CapsNet", "model", "capsnet_resnet18", needs="Gu et al.'s CapsNet")
    j = judge(claim(checks=(gu,)), run(per_seed([9950, 9945, 9955], [9900, 9910, 9895]), budget="paper"))
    assert j.verdict == PROTOCOL_NOT_MET and j.needs == "Gu et al.'s CapsNet"
    assert "capsnet stands for a side whose model is capsnet_resnet18, which capsbench does not build" in j.reason
    named = Check("Sabour et al.'s CapsNet", "model", "capsnet", sides=("better",))
    assert judge(claim(checks=(named,)), run(per_seed([9950, 9945, 9955], [9900, 9910, 9895]))).verdict == SUPPORTED
    shipped = {c.id: c for c in load_claims()}["gu2021-vote-cifar10"]
    assert any(c.kind == "model" and c.value == "capsnet_resnet18" for c in shipped.checks)


def test_an_exact_count_measured_in_three_seeds_has_no_spread():
    """Summing float parameter counts leaves a std of ~1e-15: the claims table prints it as 0, a real spread as is."""
    counts = Evidence({s: v for s, v in enumerate([6.804, 6.804 + 1e-15, 6.804])}, {}, None, None)
    spread = Evidence({0: 38.5, 1: 31.0, 2: 45.2}, {}, None, None)
    assert describe(counts) == "6.804 ± 0 (3 seeds)"
    assert describe(spread) == "38.23 ± 7.1 (3 seeds)"  # sample std of 38.5, 31.0, 45.2: 7.104


def test_parity_inside_its_margin_is_supported_and_outside_refuted():
    alike = claim(relation="parity", margin=2.0)
    inside = judge(alike, run(per_seed([9950, 9945, 9955], [9948, 9950, 9951])))  # within 0.07 points each seed
    assert inside.verdict == SUPPORTED and verdict_cell(inside) == "supported (as good as, quick, 3 seeds)"
    assert "two one-sided t-tests" in inside.reason and "Tango on 10,000 distinct test images" in inside.reason
    apart = judge(alike, run(per_seed([9950, 9945, 9955], [9500, 9520, 9480])))  # capsnet 4.5 points ahead
    assert apart.verdict == REFUTED and "capsnet is better by more than the margin of 2" in apart.reason
    unsure = judge(alike, run(per_seed([9950, 9700, 9955], [9800, 9900, 9700])))
    assert unsure.verdict == UNRESOLVED


def test_no_better_than_is_one_sided():
    fooled = claim(relation="no_better", margin=2.0)  # capsnet is not better than the CNN by 2 points or more
    worse = judge(fooled, run(per_seed([9500, 9520, 9480], [9950, 9945, 9955])))  # far behind: still "no better"
    assert worse.verdict == SUPPORTED and verdict_cell(worse) == "supported (no better than, quick, 3 seeds)"
    better = judge(fooled, run(per_seed([9950, 9945, 9955], [9500, 9520, 9480])))
    assert better.verdict == REFUTED
    one = judge(fooled, run(paired(9950, 9948)))
    assert one.verdict == UNRESOLVED and "one seed" in one.reason


def test_a_margin_claim_needs_a_margin(tmp_path):
    path = tmp_path / "claims" / "x.yaml"
    path.parent.mkdir()
    path.write_text("source: {id: x, citation: 'A. Author. Paper. 2019', arxiv: '1906.03612'}\nclaims:\n"
                    "  - {id: x-1, statement: s, where: Table 1, suite: accuracy, dataset: mnist,"
                    " metric: test_accuracy, better: {model: capsnet}, worse: {model: cnn_sabour}, relation: parity}\n")
    with pytest.raises(CapsbenchError, match="needs a positive margin"):
        load_claims_file(path)
    path.write_text(path.read_text().replace("relation: parity}", "relation: parity, margin: 2, min_effect: 1}"))
    with pytest.raises(CapsbenchError, match="min_effect' is the threshold of a beats claim"):
        load_claims_file(path)


def test_a_claim_that_cannot_fail_is_refused_when_the_files_load(tmp_path):
    path = tmp_path / "claims" / "x.yaml"
    path.parent.mkdir()
    path.write_text("source: {id: x, citation: 'A. Author. Paper. 2020', arxiv: '1907.02957'}\nclaims:\n"
                    "  - {id: x-1, statement: s, where: Abstract, suite: robustness, dataset: mnist,"
                    " metric: robust_accuracy, sweep: {attack: worst_case, eps: 0.1},"
                    " better: {model: capsnet, metric: correct_or_detected}, worse: {model: capsnet}}\n")
    with pytest.raises(CapsbenchError, match="cannot be decided by data: the better side counts every image"):
        load_claims_file(path)


def test_a_cost_claim_measured_on_two_devices_gives_a_row_per_device():
    speed = claim("latency", "efficiency", better=Side("cnn_sabour"), worse=Side("capsnet"), sweep={"batch": 1})
    rows = []
    for device, caps, cnn in (("cpu (2 threads)", [9.0, 9.2, 9.1], [26.0, 26.5, 26.2]),
                              ("NVIDIA H100", [2.3, 2.32, 2.31], [0.52, 0.5, 0.51])):
        rows += seeds("capsnet", "latency", caps, "efficiency", batch=1, device=device)
        rows += seeds("cnn_sabour", "latency", cnn, "efficiency", batch=1, device=device)
    judged = judge_claim(speed, run(rows, "efficiency"))
    assert [j.claim.sweep["device"] for j in judged] == ["NVIDIA H100", "cpu (2 threads)"]
    cells = [verdict_cell(j) for j in judged]
    assert cells == ["supported (NVIDIA H100, batch 1, quick, 3 repeats)",
                     "refuted (cpu (2 threads), batch 1, quick, 3 repeats)"]
    assert "3 repeated measurements: the seed changes nothing here" in judged[0].reason


def test_a_protocol_miss_inside_the_noise_says_so():
    checked = claim(checks=(Check("clean accuracy at least 99 %", "at_least", 99.0),))
    close = judge(checked, run(per_seed([9889, 9892, 9886], [9904, 9903, 9905])))
    assert close.verdict == PROTOCOL_NOT_MET and "within noise (±" in close.reason
    far = judge(checked, run(per_seed([9500, 9520, 9480], [9904, 9903, 9905])))
    assert "< 99 (noise ±" in far.reason and "within noise" not in far.reason
