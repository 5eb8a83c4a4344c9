"""`capsbench run suite=claims`: the plan (a unit for every claim whose data exist, the same unit keys as ordinary
runs, absent data listed with its files), a run in which a claim lacking data is listed while the others run, and the
bad input that stops it before anything loads."""

from __future__ import annotations

import json
import math
import shutil
import struct
from pathlib import Path

import pytest
from composing import compose
from conftest import MNIST_ROOT, make_splits
from typer.testing import CliRunner

from capsbench.cli import app
from capsbench.config import preflight
from capsbench.config.request import parse_command_line
from capsbench.data import idx
from capsbench.data.files import DATA_FILES
from capsbench.reporting.baselines import baselines_dir
from capsbench.reporting.claim_files import load_claims
from capsbench.run import execute
from capsbench.run.claims_plan import plan_claims
from capsbench.run.driver import run_plan
from capsbench.run.plan import plan, unit_threads
from capsbench.run.units import UnitResult

FASHION_CLAIM = """# A test fixture on real Fashion-MNIST, not a published claim: it exercises the plumbing only.
source: {id: fixture, citation: "capsbench test fixture (not a published claim)"}
claims:
  - id: fixture-fashion-fgsm
    statement: "CapsNet keeps more Fashion-MNIST test images under FGSM than cnn_sabour (test fixture)"
    where: none
    suite: robustness
    dataset: fashion_mnist
    metric: robust_accuracy
    sweep: {attack: fgsm, eps: 0.05}
    better: {model: capsnet}
    worse: {model: cnn_sabour}
    checks:  # the protocol of every claim on this pair and metric (michels2019-fashion-mnist)
      - {what: "clean accuracy at least 88 %", metric: clean_accuracy, at_least: 88.0}
"""


def with_fashion_claim(tmp_path: Path) -> Path:
    """The shipped baselines plus the Fashion-MNIST fixture claim."""
    folder = tmp_path / "baselines"
    shutil.copytree(baselines_dir(), folder)
    (folder / "claims" / "fixture.yaml").write_text(FASHION_CLAIM)
    return folder


def fake_root(tmp_path: Path, *datasets: str) -> Path:
    """A data root holding files of the named datasets: links to the real ones where $CAPSBENCH_DATA has them (the
    checks before work compare MNIST's and Fashion-MNIST's raw files with the official MD5), else files with the
    official IDX header and size (sparse zeros after it) where one is declared, else empty: enough for the plan and
    the checks before work, which read no further."""
    root, real = tmp_path / "data", MNIST_ROOT
    for name in datasets:
        spec = DATA_FILES[name]
        for f in spec.files:
            path = root / spec.folder / f
            path.parent.mkdir(parents=True, exist_ok=True)
            if (real / spec.folder / f).is_file():
                path.symlink_to(real / spec.folder / f)
                continue
            shape = spec.contents[f].shape if f in spec.contents else None
            with path.open("wb") as fh:
                if shape is not None:
                    fh.write(struct.pack(f">{1 + len(shape)}I", idx.magic(len(shape)), *shape))
                    fh.truncate(idx.header_size(len(shape)) + math.prod(shape))
    return root


def _budget(claim) -> str | None:
    return next((str(c.value) for c in claim.checks if c.kind == "budget"), None)


def test_the_plan_has_units_for_every_claim_whose_data_and_budget_it_has(tmp_path: Path):
    root = fake_root(tmp_path, "mnist", "fashion_mnist")
    folder = with_fashion_claim(tmp_path)
    p = plan_claims(parse_command_line([
        "budget=smoke", f"data.root={root}", "data.download=false", f"output_dir={tmp_path / 'out'}", "device=cpu",
        f"baselines_dir={folder}"]))
    claims = load_claims(folder)
    present = {c.id for c in claims  # an efficiency claim reads no data: it is planned whatever its dataset
               if c.suite == "efficiency" or (c.dataset in ("mnist", "fashion_mnist") and "affnist" not in c.data)}
    assert set(p.lacking) == {c.id for c in claims} - present
    assert not p.unplanned and set(p.units) == present  # smoke runs every claim's path, at the smoke budget
    assert {u.config["budget"] for units in p.units.values() for u in units} == {"smoke"}
    assert "mazzia2021-smallnorb-params" in p.units and "hinton2018-smallnorb" in p.lacking
    for claim in claims:
        if claim.id in p.units:  # every side's model measured in every default seed, in the claim's suite and dataset
            units = p.units[claim.id]
            assert {u.suite for u in units} == {claim.suite} and {u.dataset for u in units} == {claim.dataset}
            for side in (claim.better, claim.worse):  # a model on both sides with other arguments: a unit each
                variants = {str(sorted(s.model_args.items())) for s in (claim.better, claim.worse)
                            if s.model == side.model}
                assert sorted(u.seed for u in units if u.model == side.model) == [0] * len(variants)  # smoke: one
    assert "fixture-fashion-fgsm" in p.units
    smallnorb = " ".join(a.line() for a in p.lacking["hinton2018-smallnorb"])
    assert "smallnorb-5x46789x9x18x6x2x96x96-training-dat.mat" in smallnorb and "cs.nyu.edu" in smallnorb
    assert "affNIST/test.mat" in " ".join(a.line() for a in p.lacking["sabour2017-affnist"])
    detection = {u.config["params"]["detection_fpr"] for u in p.units["qin2020-reconstructive-attack"]}
    assert detection == {0.05}
    vote = p.units["gu2021-vote-mnist"]
    assert {u.config["train"].get("target_val_accuracy") for u in vote} == {None}  # the budget's own training
    grid = {tuple(u.config["params"]["eps"]["mnist"]) for u in vote}
    assert grid == {(0.0, 0.1, 0.15, 0.3)}  # the claim's eps, the black-box one, the largest
    robustness = [u for units in p.units.values() for u in units if u.suite == "robustness"]
    assert {u.config["data"]["test_subset"] for u in robustness} == {100}  # smoke: the budget's test images
    alone = {tuple(u.config["params"]["attacks"]) for u in vote}  # both attacks the claim reads, each on every image
    assert alone == {("fgsm", "apgd", "pgd", "vote")} and {"vote"} & set(vote[0].config["params"]["ensemble"]) == set()


def test_units_share_keys_with_ordinary_runs(tmp_path: Path):
    """A claim's side naming a default argument (routing_iterations: 3) keeps the ordinary unit's key, so nothing an
    ordinary `capsbench run suite=accuracy` measured is measured again (the claim sizes its test images to the whole
    test set, which the paper budget measures anyway)."""
    common = ["budget=paper", f"data.root={fake_root(tmp_path, 'mnist')}", f"output_dir={tmp_path}", "device=cpu"]
    p = plan_claims(parse_command_line([*common, "claims=[sabour2017-mnist-r3]"]))
    cfg = compose([*common, "suite=accuracy", "models=[capsnet,cnn_sabour]", "seeds=[0,1,2]"])
    cfg.threads = unit_threads(cfg)  # as run_suites fixes it before planning
    ordinary = plan(cfg)
    assert {u.key for u in p.units["sabour2017-mnist-r3"]} == {u.key for u in ordinary}


def test_a_claim_lacking_data_is_listed_while_the_others_run(tmp_path: Path, monkeypatch):
    """smallNORB is absent: its claim is listed with the files and where to get them, with no unit; the MNIST claim's
    units run (on synthetic images here) and it is judged, at smoke "protocol not met", never a verdict; a claim whose
    protocol assumes the paper budget runs its path at smoke too, and is judged the same way."""
    monkeypatch.setattr(execute, "load_data", lambda dataset, data: make_splits())
    out = tmp_path / "out"
    command = ["budget=smoke", f"data.root={fake_root(tmp_path, 'mnist')}", f"output_dir={out}", "device=cpu",
               "seeds=[0,1]", "train.epochs=1", f"tracking.uri=sqlite:///{out / 'mlflow.db'}",
               "claims=[gu2021-vote-mnist,hinton2018-smallnorb,sabour2017-mnist-r3]"]
    p = plan_claims(parse_command_line(command))
    assert list(p.lacking) == ["hinton2018-smallnorb"] and "hinton2018-smallnorb" not in p.units
    result = run_plan(p.plan)
    by_id = {j.claim.id: j for j in result.finished.detail}
    mnist, norb, paper = by_id["gu2021-vote-mnist"], by_id["hinton2018-smallnorb"], by_id["sabour2017-mnist-r3"]
    assert mnist.verdict == "protocol not met" and mnist.seeds == 2 and "budget=smoke" in mnist.reason
    assert paper.verdict == "protocol not met" and "budget=smoke" in paper.reason
    assert norb.verdict == "no records" and "smallnorb-5x01235x9x18x6x2x96x96-testing-cat.mat" in norb.reason
    assert norb.needs == "the data files: smallnorb"
    table = (out / "claims" / "claims.md").read_text()
    assert "**protocol not met** (smoke, 2 seeds)" in table
    assert "Verdicts: 2 protocol not met, 1 no records (of 3 rows)." in table
    assert "## Claims whose data files are absent (not planned)" in table and "cs.nyu.edu" in table
    report = (out / "claims" / "report.md").read_text()
    assert "## robustness-mnist-1" in report and "| capsnet" in report and "## Claims" in report
    assert {"claims.md", "claims.tex", "claims.csv", "report.md", "report.tex", "records.jsonl"} <= set(
        result.finished.paths)
    again = run_plan(plan_claims(parse_command_line(command)).plan)  # the same command: every unit is kept
    assert [j.verdict for j in again.finished.detail] == [j.verdict for j in result.finished.detail]


@pytest.mark.parametrize(
    "args,message",
    [
        (["claims=[sabour2017-mnist-r9]"], "unknown claim 'sabour2017-mnist-r9'"),
        (["claims=[sabour2017-params,sabour2017-params]"], "claims lists sabour2017-params more than once"),
        (["models=[capsnet]"], "suite=claims takes the models and datasets each claim names; drop models="),
        (["claims="], "claims= names no claim: give the ids"),
        (["params.pgd_stepz=3"], "params.pgd_stepz is a setting of no suite"),
        (["claims=[michels2019-mnist-minimal]", "params.minimal=[fab]"],
         "params.minimal=[fab] conflicts with claim michels2019-mnist-minimal, whose protocol sets "
         "params.minimal=[fmn,fab]"),
    ],
)
def test_bad_input_stops_the_claims_run(tmp_path: Path, args, message):
    result = CliRunner().invoke(app, ["run", "suite=claims", "budget=smoke", f"output_dir={tmp_path}", *args])
    assert result.exit_code == 2 and message in result.output
    assert not (tmp_path / "claims").exists()


MINE = """source: {id: mine, citation: "Me. A paper. 2026", arxiv: "2101.12491"}
claims:
  - id: mine-params
    statement: "Efficient-CapsNet has fewer parameters"
    where: Table 2
    suite: efficiency
    dataset: mnist
    metric: params
    sweep: {part: total}
    better: {model: effcapsnet, published: 0.161}
    worse: {model: capsnet, published: 6.8}
"""


@pytest.mark.parametrize(
    "old,new,message",
    [
        ("model: effcapsnet,", "model: nosuchnet,", "claim mine-params: unknown model 'nosuchnet'"),
        ("suite: efficiency", "suite: nosuite", "claim mine-params: unknown suite 'nosuite'"),
        ("published: 0.161}", "published: 0.161, model_args: {decoder_hidden: -3}}",
         "claim mine-params: model_args.effcapsnet.decoder_hidden must be"),
        ("where: Table 2", "where: Table: 2", "mine.yaml:5:17: not valid YAML"),  # line 5, column 17
        ("id: mine-params", "id: 42", "'claims[0].id' = 42 must be a name"),
    ],
)
def test_a_mistake_in_a_users_claims_file_is_reported_at_the_file_and_claim(tmp_path: Path, old, new, message):
    assert old in MINE
    folder = tmp_path / "mine" / "claims"
    folder.mkdir(parents=True)
    (folder / "mine.yaml").write_text(MINE.replace(old, new, 1))
    out = tmp_path / "out"
    args = ["run", "suite=claims", "budget=smoke", f"baselines_dir={folder.parent}", "claims=[mine-params]",
            f"output_dir={out}", "--dry-run"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and message in result.output and str(folder / "mine.yaml") in result.output
    assert not out.exists()


def test_a_users_claims_file_without_mistakes_is_planned(tmp_path: Path):
    folder = tmp_path / "mine" / "claims"
    folder.mkdir(parents=True)
    (folder / "mine.yaml").write_text(MINE)
    args = ["run", "suite=claims", "budget=smoke", f"baselines_dir={folder.parent}", "claims=[mine-params]",
            f"output_dir={tmp_path / 'out'}", "--dry-run"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0 and "claim mine-params: 2 units" in result.output, result.output


def test_claims_runs_alone(tmp_path: Path):
    result = CliRunner().invoke(app, ["run", "suite=[claims,accuracy]", f"output_dir={tmp_path}"])
    assert result.exit_code == 2 and "suite=claims runs alone" in result.output


def test_a_bad_claim_id_fails_before_torch_loads(cli_probe, tmp_path: Path):
    probe = cli_probe(["run", "suite=claims", "claims=[nope]"], cwd=tmp_path)
    assert probe.code == 2 and "unknown claim 'nope'" in probe.stderr and "torch" not in probe.heavy


def _claims_cli(tmp_path: Path, *extra: str) -> list[str]:
    """`capsbench run suite=claims` of the Fashion-MNIST fixture claim at smoke size, everything under tmp_path."""
    return ["run", "suite=claims", "budget=smoke", "device=cpu", "seeds=[0]", "train.epochs=1",
            f"baselines_dir={with_fashion_claim(tmp_path)}", "claims=[fixture-fashion-fgsm]",
            f"output_dir={tmp_path / 'out'}", *extra]


def test_offline_claims_run_with_data_to_download_stops_before_anything_is_written(tmp_path: Path, monkeypatch):
    """The claims path gets the checks before work of every run: Fashion-MNIST absent, data.download=true and no
    answer from its download host is one line and exit 2, before a file, run or download exists."""
    monkeypatch.setattr(preflight, "reachable", lambda host, port, timeout=3.0: "no answer within 3 s")
    root = fake_root(tmp_path, "mnist")
    quick = [a.replace("budget=smoke", "budget=quick") for a in _claims_cli(tmp_path, f"data.root={root}",
                                                                          "data.download=true")]
    result = CliRunner().invoke(app, quick)  # quick: smoke reads only data already here
    errors = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2, result.output
    assert len(errors) == 1 and errors[0].startswith("error: ") and "cannot be reached" in errors[0], result.output
    assert "fashion_mnist" in errors[0] and "claims section robustness-fashion_mnist-1" in errors[0]
    assert not (tmp_path / "out").exists() and not (root / "FashionMNIST").exists()


def test_a_smoke_claims_run_lists_data_it_would_download_as_absent(tmp_path: Path):
    root = fake_root(tmp_path, "mnist")
    p = plan_claims(parse_command_line(_claims_cli(tmp_path, f"data.root={root}", "data.download=true")[2:]))
    assert "fixture-fashion-fgsm" in p.lacking and not p.downloads


def test_a_unit_failing_inside_a_claims_run_exits_3_with_the_claims_table(tmp_path: Path, monkeypatch):
    def broken(dataset, data):
        raise RuntimeError("disk gone")

    monkeypatch.setattr(execute, "load_data", broken)
    root = fake_root(tmp_path, "mnist", "fashion_mnist")
    result = CliRunner().invoke(app, _claims_cli(tmp_path, f"data.root={root}", "tracking.enabled=false"))
    assert result.exit_code == 3, result.output
    assert "unit(s) failed" in result.output and "disk gone" in result.output
    table = (tmp_path / "out" / "claims" / "claims.md").read_text()
    assert "fixture-fashion-fgsm" in table and "failed (RuntimeError: disk gone)" in table


def test_claims_run_prints_json_with_its_verdicts(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(execute, "load_data", lambda dataset, data: make_splits())
    root = fake_root(tmp_path, "mnist", "fashion_mnist")
    result = CliRunner().invoke(app, [*_claims_cli(tmp_path, f"data.root={root}"), "--format", "json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    sections, claims = rows[:-1], rows[-1]
    assert [s["suite"] for s in sections] == ["robustness"] and sections[0]["records"] > 0
    assert claims["suite"] == "claims" and claims["mlflow"]["run_id"]
    assert [c["id"] for c in claims["claims"]] == ["fixture-fashion-fgsm"]
    assert claims["claims"][0]["verdict"] == "protocol not met"  # a smoke run never yields a verdict
    assert Path(claims["files"]["claims.md"]).is_file()


def test_a_paper_budget_claim_of_a_suite_that_trains_nothing_is_judged_at_paper_in_a_quick_run(tmp_path: Path):
    """The parameter claim's efficiency units are measured at budget=paper whatever the run's budget, so its verdict
    reads their budget: decided (an exact count: reproduced, no seeds), not 'measured at budget=quick'."""
    root = fake_root(tmp_path, "mnist")
    p = plan_claims(parse_command_line(["budget=quick", f"data.root={root}", f"output_dir={tmp_path}", "device=cpu",
                                        "claims=[sabour2017-params]"]))
    units = p.units["sabour2017-params"]
    assert {u.config["budget"] for u in units} == {"paper"} and len(units) == 6
    counts = {"capsnet": 8.215568, "cnn_sabour": 35.445522}
    done = {u.key: UnitResult(key=u.key, spec=u, status="done", params={}, records=[
        {"suite": "efficiency", "model": u.model, "dataset": "mnist", "seed": u.seed, "metric": "params",
         "value": counts[u.model], "part": "total"}]) for u in units}
    (claim,) = p.claims
    (judged,) = p.plan.finish._judgements(claim, done)
    assert (judged.verdict, judged.budget, judged.seeds) == ("reproduced", "paper", 0), judged.reason


def test_a_smoke_claims_plan_trains_the_smoke_budget_and_downloads_nothing(tmp_path: Path):
    """At smoke nothing is judged, so no claim's training target applies (smoke models never reach 99.4 % and trained
    to the 20-epoch cap); and it reads only the data already here: a claim whose data torchvision would download is
    listed as lacking them."""
    root = fake_root(tmp_path, "mnist")
    common = ["budget=smoke", f"data.root={root}", "data.download=true", f"output_dir={tmp_path / 'out'}", "device=cpu"]
    folder = tmp_path / "baselines"
    (folder / "claims").mkdir(parents=True)
    (folder / "claims" / "targeted.yaml").write_text(
        "source: {id: t, citation: 'A. Author. Paper. 2020', arxiv: '2001.00001'}\nclaims:\n"
        "  - {id: t-1, statement: s, where: Table 1, suite: accuracy, dataset: mnist, metric: test_accuracy,"
        " better: {model: capsnet}, worse: {model: cnn_sabour}, train: {target_val_accuracy: 99.4, max_epochs: 20},"
        " checks: [{what: w, at_least: 99.0}]}\n")
    targeted = plan_claims(parse_command_line([*common, f"baselines_dir={folder}"]))
    assert {u.config["train"].get("target_val_accuracy") for u in targeted.units["t-1"]} == {None}
    p = plan_claims(parse_command_line(common))
    assert not p.downloads and any(c.startswith("circulated-cifar10") for c in p.lacking)
