"""A claims plan sized by what each claim needs: test images from a power calculation, training to a target with a
cap, and verdicts that say the power they had; no product file points at an issue tracker."""

from __future__ import annotations

import re
import shutil

import report_fixtures as fixtures
from conftest import REPO, make_splits
from test_claims import claim, run
from test_claims_run import fake_root

from capsbench.config.request import parse_command_line
from capsbench.reporting.baselines import baselines_dir
from capsbench.reporting.claim_files import Side
from capsbench.reporting.verdicts import NO_RECORDS, PROTOCOL_NOT_MET, UNRESOLVED, judge
from capsbench.run import execute
from capsbench.run.claims_plan import plan_claims
from capsbench.run.claims_sizing import claim_need
from capsbench.run.driver import run_plan


def test_a_twenty_point_gap_plans_far_fewer_images_than_a_two_point_gap():
    wide = claim(better=Side("capsnet", published=70.0), worse=Side("cnn_sabour", published=50.0))
    narrow = claim(better=Side("capsnet", published=51.0), worse=Side("cnn_sabour", published=49.0))
    a, b = claim_need(wide, 10_000), claim_need(narrow, 10_000)
    assert a.images == 391 and b.images == 10_000  # the narrow gap needs more than the test set: all of it
    assert "half the published gap" in a.images_why and "would need" in b.images_why
    sized = claim(better=Side("capsnet"), worse=Side("cnn_sabour"), min_effect=5.0)  # no published numbers
    assert claim_need(sized, 10_000).images == 1568


def test_a_not_resolved_verdict_states_the_power_it_had_and_what_would_decide_it():
    published = {"better": Side("capsnet", published=60.0), "worse": Side("cnn_sabour", published=50.0)}
    few = judge(claim(**published), run([fixtures.acc("accuracy", "capsnet", "test_accuracy", 22, 40),
                                         fixtures.acc("accuracy", "cnn_sabour", "test_accuracy", 20, 40)]))
    assert few.verdict == UNRESOLVED and "power 52% for the published gap of 10 points with 40 images" in few.reason
    assert few.needs == "about 77 test images per seed for 80% power"
    many = [fixtures.acc("accuracy", m, "test_accuracy", k, 100, seed=s)
            for s, (a, b) in enumerate([(52, 50), (58, 50), (50, 51)]) for m, k in (("capsnet", a), ("cnn_sabour", b))]
    enough = judge(claim(**published), run(many))  # the seeds disagree although a 10-point gap would have shown
    assert enough.verdict == UNRESOLVED and "power 90%" in enough.reason and "true gap is smaller" in enough.reason
    assert enough.needs == "more seeds"


CAPPED = """source: {id: fixture, citation: "capsbench test fixture (not a published claim)", arxiv: "0000.00000"}
claims:
  - id: fixture-capped
    statement: "tiny CapsNet beats a tiny CNN (test fixture)"
    where: none
    suite: accuracy
    dataset: mnist
    metric: test_accuracy
    better: {model: capsnet, model_args: {conv_channels: 8, primary_types: 2, primary_dim: 4, class_dim: 4}}
    worse: {model: cnn_9x9, model_args: {channels: [4, 4, 2], fc: [8, 8]}}
    train: {target_val_accuracy: 99.9, max_epochs: 1}
    checks:
      - {what: "both at least 99 % accurate", at_least: 99.0, needs: "longer training"}
"""


def fixture_plan(tmp_path, monkeypatch, text: str, claim_id: str):
    """The claims plan of one fixture claim (`text`, a claims file) on synthetic images, two seeds, tracking off."""
    monkeypatch.setattr(execute, "load_data", lambda dataset, data: make_splits())
    folder = tmp_path / "baselines"
    shutil.copytree(baselines_dir(), folder)
    (folder / "claims" / "fixture.yaml").write_text(text)
    return plan_claims(parse_command_line([
        f"data.root={fake_root(tmp_path, 'mnist')}", f"output_dir={tmp_path / 'out'}", "device=cpu", "threads=1",
        "seeds=[0,1]", "tracking.enabled=false", f"baselines_dir={folder}", f"claims=[{claim_id}]"]))


def test_a_claim_whose_training_target_is_not_reached_within_its_cap_is_protocol_not_met(tmp_path, monkeypatch):
    p = fixture_plan(tmp_path, monkeypatch, CAPPED, "fixture-capped")
    trains = {u.model: u.config["train"] for u in p.units["fixture-capped"]}
    assert {t["epochs"] for t in trains.values()} == {1} and {t["target_val_accuracy"] for t in trains.values()} == {
        99.9}
    (judged,) = run_plan(p.plan).finished.detail
    assert judged.verdict == PROTOCOL_NOT_MET and judged.budget == "quick" and "99" in judged.reason
    assert judged.needs == "longer training"


PRODUCT = ("capsbench", "baselines", "suites", "docs", "results", "examples", "benchmarks", "tests")
TRACKER = re.compile(r"\bissues? ?#?\d+\b", re.IGNORECASE)


def test_no_product_file_mentions_an_issue():
    files = [REPO / "README.md", *(p for top in PRODUCT for p in (REPO / top).rglob("*") if p.is_file())]
    named = [f"{p.relative_to(REPO)}: {m.group(0)}" for p in files if p.suffix in (".py", ".md", ".yaml", ".tex")
             for m in [TRACKER.search(p.read_text(errors="replace"))] if m]
    assert not named


def test_a_dry_run_plans_the_units_the_run_would_so_it_sees_which_finished(tmp_path):
    command = parse_command_line([f"data.root={fake_root(tmp_path, 'mnist')}", f"output_dir={tmp_path / 'out'}",
                                  "threads=1", "claims=[marchisio2023-routing]"])  # device=auto
    ran, priced = plan_claims(command).plan, plan_claims(command, gpu="H100").plan  # a run; a dry run's plan
    keys = [[u.key for u in s.units] for s in ran.sections]
    assert keys and keys == [[u.key for u in s.units] for s in priced.sections]
    assert {s.cfg.device for s in priced.sections} == {s.cfg.device for s in ran.sections} != {"auto"}


TWO_WAYS = """source: {id: fixture, citation: "capsbench test fixture (not a published claim)", arxiv: "0000.00000"}
claims:
  - id: fixture-routing
    statement: "a tiny CapsNet with 3 routing iterations is no more accurate than with 1 (test fixture)"
    where: none
    suite: accuracy
    dataset: mnist
    metric: test_accuracy
    better: {model: capsnet, model_args: {conv_channels: 8, primary_types: 2, primary_dim: 4, class_dim: 4,
                                          routing_iterations: 3}}
    worse: {model: capsnet, model_args: {conv_channels: 8, primary_types: 2, primary_dim: 4, class_dim: 4,
                                         routing_iterations: 1}}
    relation: no_better
    margin: 50.0
"""


def test_a_claim_on_one_model_measured_two_ways_judges_each_side_from_its_own_units(tmp_path, monkeypatch):
    p = fixture_plan(tmp_path, monkeypatch, TWO_WAYS, "fixture-routing")
    result = run_plan(p.plan)
    (judged,) = result.finished.detail
    assert judged.verdict != NO_RECORDS, judged.reason  # it read "no records": one side checked by the other's args
    measured = {}  # each side's accuracies, read from its own section by routing iterations
    for section in result.sections:
        routing = int(section.cfg.model_args.capsnet.get("routing_iterations", 3))
        measured[routing] = {int(r["seed"]): r["value"] for r in section.records if r["metric"] == "test_accuracy"}
    assert sorted(measured) == [1, 3] and judged.better.values == measured[3] and judged.worse.values == measured[1]
