"""Robustness suite: sanity checks on hand-made records, a gradient-masked toy model that must trip them,
the notes in the table, and `suite=robustness budget=smoke` end to end on real MNIST."""

import csv

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from capsbench.cli import app
from capsbench.config import compose
from capsbench.errors import CapsbenchError
from capsbench.models import Classifier, ModelOutput
from capsbench.protocols import TrainingProtocol
from capsbench.report import write_outputs
from capsbench.suites.base import Context
from capsbench.suites.robustness import RobustnessParams, RobustnessSuite
from capsbench.suites.robustness_checks import CHECKS, sanity_flags
from conftest import make_splits


class BandModel(Classifier):
    """Scores each class by the mean brightness of its row band, where make_splits writes the label.

    quantise=True rounds the input to {0, 1} first: the decision barely changes but every input gradient
    is zero, the textbook case of gradient masking."""

    def __init__(self, *, quantise: bool = False) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(10.0))  # attacks find the device through a parameter
        self.quantise = quantise

    def forward(self, x, labels=None):
        if self.quantise:
            x = torch.round(x)
        bands = torch.stack([x[:, 0, 2 * c + 4 : 2 * c + 6, 4:-4].mean(dim=(1, 2)) for c in range(10)], dim=1)
        logits = self.scale * bands  # (B, 10)
        return ModelOutput(scores=torch.softmax(logits, dim=1), logits=logits)


def measure(model: Classifier) -> list[dict]:
    params = RobustnessParams(
        eps={"synthetic": [0.0, 0.25, 0.5]}, blackbox_eps={"synthetic": 0.5}, pgd_steps=10, square_queries=200,
        batch_size=16, examples=4,
    )
    ctx = Context(model=model.eval(), model_name="band", splits=make_splits(n_test=48), params=params, device="cpu",
                  batch_size=16, seed=0, protocol=TrainingProtocol())
    return [{"model": "band", "dataset": "synthetic", "seed": 0, **r} for r in RobustnessSuite().measure(ctx)]


def fired(records) -> set[str]:
    return {r["check"] for r in records if r["metric"] == "sanity_flag" and r["value"] == 1.0}


def value(records, attack, eps) -> float:
    (v,) = [r["value"] for r in records if r.get("attack") == attack and r.get("eps") == eps and r["metric"] == "robust_accuracy"]
    return v


def test_flags_stay_quiet_on_a_normal_model():
    records = measure(BandModel())
    clean = [r["value"] for r in records if r["metric"] == "clean_accuracy"]
    assert clean == [100.0]
    for attack in ("fgsm", "pgd", "pgd_margin"):
        assert value(records, attack, 0.0) == 100.0 and value(records, attack, 0.5) == 0.0
    assert fired(records) == set()
    assert {r["check"] for r in records if r["metric"] == "sanity_flag"} == set(CHECKS)
    assert [r["value"] for r in records if r["metric"] == "sanity_flags"] == [0.0]


def test_flags_fire_on_a_gradient_masked_model():
    records = measure(BandModel(quantise=True))
    assert value(records, "pgd", 0.5) == 100.0  # zero gradients: PGD is stuck
    assert value(records, "square", 0.5) < 50.0  # the black-box attack is not fooled by the masking
    assert fired(records) == {"blackbox_not_stronger", "near_zero_at_max_eps"}
    assert [r["value"] for r in records if r["metric"] == "sanity_flags"] == [2.0]


def rec(metric, value, **cols):
    return {"model": "m", "dataset": "d", "seed": 0, "metric": metric, "value": value, **cols}


def curve_records(fgsm, pgd, square=None, clean=90.0):
    rows = [rec("clean_accuracy", clean)]
    rows += [rec("robust_accuracy", v, attack="fgsm", eps=e) for e, v in zip((0.0, 0.1, 0.3), fgsm)]
    rows += [rec("robust_accuracy", v, attack="pgd", eps=e) for e, v in zip((0.0, 0.1, 0.3), pgd)]
    if square is not None:
        rows.append(rec("robust_accuracy", square, attack="square", eps=0.1))
    return rows


@pytest.mark.parametrize("records, expected", [
    (curve_records([90, 50, 5], [90, 40, 0], square=45), set()),
    (curve_records([90, 50, 5], [89, 40, 0]), {"eps0_equals_clean"}),
    (curve_records([90, 50, 5], [90, 55, 0]), {"pgd_not_weaker_than_fgsm"}),
    (curve_records([90, 50, 60], [90, 40, 0]), {"monotone_in_eps"}),
    (curve_records([90, 50, 5], [90, 40, 0], square=30), {"blackbox_not_stronger"}),
    (curve_records([90, 50, 5], [90, 40, 2]), {"near_zero_at_max_eps"}),
])
def test_each_check_fires_on_its_own_violation(records, expected):
    assert {f.check for f in sanity_flags(records, near_zero=1.0) if f.fired} == expected


def test_fired_flags_are_footnotes_of_the_table(tmp_path):
    rows = [{"suite": "robustness", **r} for r in curve_records([90, 50, 5], [90, 55, 0])]
    suite = RobustnessSuite()
    md = write_outputs(tmp_path, rows, RobustnessSuite, notes=suite.notes(rows, RobustnessParams()))["table.md"].read_text()
    assert "FLAG m / d seed 0: pgd_not_weaker_than_fgsm" in md and "pgd 55.00 % > fgsm 50.00 % at eps=0.1" in md
    assert "robust_accuracy (attack=pgd, eps=0.1)" in md


@pytest.mark.parametrize("override, message", [
    ("params.eps.mnist=[0.1,0.2]", "include 0"),
    ("params.eps.mnist=[0,0.2,0.1]", "increasing"),
    ("params.attacks=[pgd,sqaure]", "did you mean 'square'"),
    ("params.blackbox_eps.mnist=0.12", "nonzero value of the eps grid"),
    ("dataset=mnist", None),
])
def test_config_mistakes_stop_before_training(tmp_path, override, message):
    args = ["suite=robustness", f"output_dir={tmp_path}", override]
    if message is None:
        assert compose(args).params.eps["mnist"][0] == 0.0
        return
    with pytest.raises(CapsbenchError, match=message):
        compose(args)


@pytest.mark.slow
def test_robustness_smoke_end_to_end(tmp_path, mnist_root):
    args = ["run", "suite=robustness", "budget=smoke", f"output_dir={tmp_path / 'out'}", f"data.root={mnist_root}",
            "data.download=false", f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}", "device=cpu"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    out = tmp_path / "out" / "robustness"
    with open(out / "records.csv") as fh:
        rows = list(csv.DictReader(fh))
    cleans = []
    for model in ("capsnet", "cnn_sabour", "cnn_9x9"):
        mine = [{**r, "value": float(r["value"]), "seed": int(r["seed"]), "eps": float(r["eps"]) if r["eps"] else None}
                for r in rows if r["model"] == model]
        (clean,) = [r["value"] for r in mine if r["metric"] == "clean_accuracy"]
        cleans.append(clean)
        robust = {(r["attack"], r["eps"]): r["value"] for r in mine if r["metric"] == "robust_accuracy"}
        grid = [0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3]
        assert set(robust) == {(a, e) for a in ("fgsm", "pgd", "pgd_margin") for e in grid} | {("square", 0.15)}
        assert all(robust[(a, 0.0)] == clean for a in ("fgsm", "pgd", "pgd_margin"))
        flags = {r["check"]: r["value"] for r in mine if r["metric"] == "sanity_flag"}
        assert set(flags) == set(CHECKS) and flags["eps0_equals_clean"] == 0.0
        recomputed = {f.check: float(f.fired) for f in sanity_flags(mine, near_zero=1.0)}
        assert flags == recomputed
        for check, v in flags.items():
            if v:
                assert f"FLAG {model} / mnist seed 0: {check}" in result.output
        assert (out / "figures" / f"adversarial_examples-{model}-s0.png").stat().st_size > 0
    assert max(cleans) > 50.0, f"no smoke model is well above chance: {cleans}"
    assert "robust_accuracy (attack=pgd, eps=0.3)" in (out / "table.md").read_text()
    assert (out / "robust_accuracy_vs_eps.pdf").read_bytes()[:4] == b"%PDF"


@pytest.mark.parametrize("budget", ["smoke", "quick", "paper"])
def test_robustness_reuses_the_accuracy_suites_checkpoints(tmp_path, budget):
    from capsbench.suites import SUITES
    from capsbench.training import training_identity

    splits = make_splits()
    identities = []
    for suite in ("accuracy", "robustness"):
        cfg = compose([f"suite={suite}", f"budget={budget}", f"output_dir={tmp_path}"])
        identities.append([training_identity(cfg, m, 0, splits, SUITES.get(suite)().protocol(cfg)) for m in cfg.models])
    assert identities[0] == identities[1]
