"""Robustness suite: sanity checks on hand-made records, a gradient-masked toy model that must trip them,
the notes in the table, and `suite=robustness budget=smoke` end to end on real MNIST."""

import contextlib
import csv
from pathlib import Path

import numpy as np
import pytest
import torch
from composing import compose
from conftest import make_splits
from omegaconf import OmegaConf
from test_models import tiny_args
from torch import nn
from typer.testing import CliRunner

from capsbench import create_model, list_models
from capsbench.attacks.base import MinimalAttack
from capsbench.cli import app
from capsbench.data import load_splits
from capsbench.errors import CapsbenchError
from capsbench.models import MODELS, Classifier, ModelOutput
from capsbench.reporting.outputs import write_suite
from capsbench.suites import SUITES
from capsbench.suites.base import Context
from capsbench.suites.robustness.checks import CHECKS, sanity_flags
from capsbench.suites.robustness.params import RobustnessParams, eps_grid
from capsbench.suites.robustness.suite import attack_passes
from capsbench.train.protocols import TrainingProtocol
from capsbench.util.progress import on_measured
from capsbench.util.stats import accuracy_fields

RobustnessSuite = SUITES.get("robustness")  # named by its catalog entry


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


ATTACK_ARGS = {"pgd": {"steps": 10}, "pgd_adaptive": {"steps": 10}, "vote": {"steps": 10},
               "pgd_detect_aware": {"steps": 10}, "apgd": {"steps": 10}, "apgd_targeted": {"steps": 10, "targets": 2},
               "square": {"queries": 200}}


def band_params(attack_args=None, **overrides) -> RobustnessParams:
    """The params of `measure`; attack_args: settings that replace ATTACK_ARGS's, per attack and setting."""
    given = attack_args or {}
    args = {a: {**ATTACK_ARGS.get(a, {}), **given.get(a, {})} for a in {*ATTACK_ARGS, *given}}
    settings = {"eps": {"synthetic": [0.0, 0.25, 0.5]}, "blackbox_eps": {"synthetic": 0.5}, "attack_args": args,
                "batch_size": 16, "examples": 4, **overrides}
    return RobustnessParams(**settings)


def measure(model: Classifier, attack_args=None, **overrides) -> list[dict]:
    """The suite's records on 48 band images with band_params(attack_args, **overrides)."""
    params = band_params(attack_args, **overrides)
    ctx = Context(model=model.eval(), model_name="band", splits=make_splits(n_test=48), params=params, device="cpu",
                  batch_size=16, seed=0, protocol=TrainingProtocol(), resources=eps_grid(params, "synthetic"))
    return [{"model": "band", "dataset": "synthetic", "seed": 0, **r} for r in RobustnessSuite().measure(ctx)]


FEW_STEPS = {a: {"steps": 3} for a in ("pgd", "pgd_adaptive", "vote", "apgd", "apgd_targeted")} | {
    "square": {"queries": 20}}


def fired(records) -> set[str]:
    return {r["check"] for r in records if r["metric"] == "sanity_flag" and r["value"] == 1.0}


def value(records, attack, eps, metric="robust_accuracy") -> float:
    (v,) = [r["value"] for r in records if r.get("attack") == attack and r.get("eps") == eps and r["metric"] == metric]
    return v


def test_flags_stay_quiet_on_a_normal_model():
    records = measure(BandModel())
    clean = [r for r in records if r["metric"] == "clean_accuracy"]
    assert [r["value"] for r in clean] == [100.0] and clean[0]["n"] == 48 and clean[0]["ci_high"] == 100.0
    for attack in ("fgsm", "apgd", "worst_case"):
        assert value(records, attack, 0.0) == 100.0 and value(records, attack, 0.5) == 0.0
    # the ensemble attacks only what the attacks before it left: here nothing at eps 0.5
    assert value(records, "apgd_targeted", 0.5, "marginal_breaks") == 0
    assert value(records, "square", 0.5, "marginal_breaks") == 0
    assert fired(records) == set()
    # the capsule-adaptive attacks do not apply to a CNN: skipped with a reason, so their check has nothing to compare
    assert {r["attack"] for r in records if r["metric"] == "attack_skipped"} == {"pgd_adaptive", "vote"}
    # no minimum-norm attack ran (params.minimal is empty): its check has nothing to compare either
    assert {r["check"] for r in records if r["metric"] == "sanity_flag"} == set(CHECKS) - {"adaptive_stronger",
                                                                                           "minimal_within_bound"}
    assert [r["value"] for r in records if r["metric"] == "sanity_flags"] == [0.0]


def test_every_accuracy_record_carries_n_and_a_wilson_interval():
    for r in measure(BandModel(quantise=True)):
        if r["metric"] in ("clean_accuracy", "robust_accuracy"):
            assert r["n"] == 48 and r["ci_low"] <= r["value"] <= r["ci_high"] and isinstance(r["outcomes"], str)


def test_worst_case_is_below_every_attack_and_monotone():
    records = measure(BandModel(quantise=True))
    grid = (0.0, 0.25, 0.5)
    worst = [value(records, "worst_case", e) for e in grid]
    assert worst == sorted(worst, reverse=True) and worst[0] == 100.0
    for r in records:
        if r["metric"] == "robust_accuracy" and r["attack"] != "worst_case":
            assert value(records, "worst_case", r["eps"]) <= r["value"]
    assert value(records, "worst_case", 0.5) < value(records, "apgd", 0.5) == 100.0  # Square broke what APGD left
    assert value(records, "worst_case", 0.5) == pytest.approx(100.0 - value(records, "square", 0.5, "marginal_breaks"))


def test_early_exit_and_the_pools_shape_leave_the_records_identical():
    """Early exit off and a pool of 7 rows; then the engine as on a GPU (a read every 3 iterates, speculation): the
    same records but for the cost's (time, iterates, forward calls, reads)."""
    cost = ("attack_throughput", "attack_iterates", "attack_forward_calls", "attack_host_reads")
    fast = measure(BandModel(quantise=True))
    for slow in (measure(BandModel(quantise=True), early_exit=False, batch_size=7),
                 measure(BandModel(quantise=True), compact_every=3, speculate=True)):

        def strip(rows):
            return [{k: v for k, v in r.items() if k != "value" or r["metric"] not in cost} for r in rows]

        assert strip(fast) == strip(slow)


def test_flags_fire_on_a_gradient_masked_model():
    records = measure(BandModel(quantise=True))
    assert value(records, "apgd", 0.5) == 100.0  # zero gradients: APGD is stuck
    assert value(records, "square", 0.5, "marginal_breaks") > 50.0  # the black-box attack is not fooled by the masking
    assert fired(records) == {"blackbox_not_stronger", "near_zero_at_max_eps"}
    assert [r["value"] for r in records if r["metric"] == "sanity_flags"] == [2.0]


def test_extra_attacks_only_lower_the_worst_case():
    base = measure(BandModel(quantise=True), attacks=["fgsm", "pgd"], ensemble=[])
    extra = measure(BandModel(quantise=True), attacks=["fgsm", "pgd"], ensemble=[], extra_attacks=["square"])
    assert value(base, "worst_case", 0.5) == 100.0 and value(extra, "worst_case", 0.5) < 50.0
    assert not [r for r in extra if r.get("attack") == "square" and r["metric"] == "robust_accuracy"]


def rec(metric, value, **cols):
    return {"model": "m", "dataset": "d", "seed": 0, "metric": metric, "value": value, **cols}


def accuracy_rec(metric, percent, n=200, **cols):
    """A record with outcomes: the first percent% of n images right."""
    ok = np.arange(n) < round(percent * n / 100)
    return {"model": "m", "dataset": "d", "seed": 0, "metric": metric, **accuracy_fields(ok), **cols}


def marginal_records(attack, counts, n=200):
    """An ensemble attack's marginal breaks: counts[i] of n images newly broken at eps 0.1, 0.3."""
    return [accuracy_rec("marginal_breaks", 100 * k / n, n, attack=attack, eps=e) for e, k in zip((0.1, 0.3), counts)]


def curve_records(fgsm, pgd, square=None, clean=90.0, adaptive=None):
    rows = [accuracy_rec("clean_accuracy", clean)]
    rows += [accuracy_rec("robust_accuracy", v, attack="fgsm", eps=e) for e, v in zip((0.0, 0.1, 0.3), fgsm)]
    rows += [accuracy_rec("robust_accuracy", v, attack="pgd", eps=e) for e, v in zip((0.0, 0.1, 0.3), pgd)]
    if adaptive is not None:
        rows += [
            accuracy_rec("robust_accuracy", v, attack="pgd_adaptive", eps=e) for e, v in zip((0.0, 0.1, 0.3), adaptive)
        ]
    if square is not None:
        rows.append(accuracy_rec("robust_accuracy", square, attack="square", eps=0.1))
    return rows


@pytest.mark.parametrize(
    "records, expected",
    [
        (curve_records([90, 50, 5], [90, 40, 0], square=45), set()),
        (curve_records([90, 50, 5], [89, 40, 0]), {"eps0_equals_clean"}),
        (curve_records([90, 50, 5], [90, 55, 0]), {"pgd_not_weaker_than_fgsm"}),
        (curve_records([90, 50, 60], [90, 40, 0]), {"monotone_in_eps"}),
        (curve_records([90, 50, 5], [90, 40, 0], square=30), {"blackbox_not_stronger"}),
        (curve_records([90, 50, 5], [90, 40, 2]), {"near_zero_at_max_eps"}),
        (curve_records([90, 50, 5], [90, 40, 0], adaptive=[90, 38, 0]), set()),  # 2 points on 200 images: noise
        (curve_records([90, 50, 5], [90, 40, 0], adaptive=[90, 25, 0]), {"adaptive_stronger"}),
        (curve_records([90, 50, 5], [90, 40, 0]) + marginal_records("square", [0]), set()),
        (curve_records([90, 50, 5], [90, 40, 0]) + marginal_records("square", [1]), {"blackbox_not_stronger"}),
        (curve_records([90, 50, 5], [90, 40, 0]) + marginal_records("pgd_adaptive", [5, 0]), set()),  # p = 0.06
        (curve_records([90, 50, 5], [90, 40, 0]) + marginal_records("vote", [6, 0]), {"adaptive_stronger"}),
        # the worst case at the largest eps reaches 0 only through a black-box ensemble attack: white-box is not ~0
        (curve_records([90, 50, 5], [90, 40, 2]) + [accuracy_rec("robust_accuracy", v, attack="worst_case", eps=e)
                                                    for e, v in zip((0.0, 0.1, 0.3), (90, 40, 0))]
         + marginal_records("square", [0, 4]), {"blackbox_not_stronger", "near_zero_at_max_eps"}),
    ],
)
def test_each_check_fires_on_its_own_violation(records, expected):
    assert {f.check for f in sanity_flags(records, near_zero=1.0) if f.fired} == expected


def test_fired_flags_are_footnotes_of_the_table(tmp_path):
    rows = [{"suite": "robustness", **r} for r in curve_records([90, 50, 5], [90, 55, 0])]
    suite = RobustnessSuite()
    md = write_suite(tmp_path, rows, RobustnessSuite, notes=suite.notes(rows, RobustnessParams())).paths[
        "table.md"
    ].read_text()
    assert "FLAG m / d seed 0: pgd_not_weaker_than_fgsm" in md and "pgd 55.00 % > fgsm 50.00 % at eps=0.1" in md
    assert "| attack | model | eps=0.1 | eps=0.3 |" in md  # eps 0 (= clean) is left out of the per-attack blocks
    assert "| PGD | m | 55.0 [48.1, 61.7] | 0.0 [0.0, 1.9] |" in md and "| FGSM | m | 50.0 [43.1, 56.9] |" in md


@pytest.mark.parametrize(
    "override, message",
    [
        ("params.eps.mnist=[0.1,0.2]", "include 0"),
        ("params.eps.mnist=[0,0.2,0.1]", "increasing"),
        ("params.attacks=[pgd,sqaure]", "did you mean 'square'"),
        ("params.blackbox_eps.mnist=0.12", "nonzero value of the eps grid"),
        ("params.attacks=[pgd,pgd_detect_aware]", "params.detection_fpr=0.05"),
        ("params.ensemble=[apgd_targetd]", "did you mean 'apgd_targeted'"),
        ("params.ensemble=[fgsm]", "'fgsm' is named twice"),
        ("params.minimal=[fmn,fab,fmn]", "'fmn' is named twice in params.minimal"),
        ("params.attack_args.apgd.steps=0", "params.attack_args.apgd.steps"),
        ("params.attack_args.apgd.step=5", "apgd has no setting 'step'"),
        ("params.attack_args.apgd.steps=[3,4]", "apgd.steps takes one value, not a list"),
        ("params.attack_args.fmn.steps=null", "fmn.steps has no off value \\(null\\): .* its default 100"),
        ("params.attack_args.apgd.long_steps=null", None),  # null is long_steps' default: no long schedule
        ("params.compact_every=0", "must be >= 1"),
        ("params.detection_fpr=1.5", "false-positive rate in \\(0, 1\\)"),
        ("dataset=mnist", None),
    ],
)
def test_config_mistakes_stop_before_training(tmp_path, override, message):
    args = ["suite=robustness", f"output_dir={tmp_path}", override]
    if message is None:
        assert compose(args).params.eps["mnist"][0] == 0.0
        return
    with pytest.raises(CapsbenchError, match=message):
        compose(args)


@pytest.mark.slow
def test_robustness_smoke_end_to_end(tmp_path, mnist_root):
    args = [
        "run",
        "suite=robustness",
        "budget=smoke",
        f"output_dir={tmp_path / 'out'}",
        f"data.root={mnist_root}",
        "data.download=false",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
        "device=cpu",
        "params.detection_fpr=0.05",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    out = tmp_path / "out" / "robustness"
    with open(out / "records.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert {"n", "ci_low", "ci_high"} <= set(rows[0])
    cleans = []
    grid = [0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3]
    for model in ("capsnet", "cnn_sabour", "cnn_9x9"):
        mine = [
            {**r, "value": float(r["value"]), "seed": int(r["seed"]), "eps": float(r["eps"]) if r["eps"] else None}
            for r in rows
            if r["model"] == model
        ]
        assert mine, f"no records of {model}: {result.output[-3000:]}"
        (clean,) = [r["value"] for r in mine if r["metric"] == "clean_accuracy"]
        cleans.append(clean)
        robust = {(r["attack"], r["eps"]): r for r in mine if r["metric"] == "robust_accuracy"}
        marginal = {(r["attack"], r["eps"]) for r in mine if r["metric"] == "marginal_breaks"}
        if model == "capsnet":  # it has a detector: every attack runs on every image and is reported alone
            attacks = ("fgsm", "apgd", "apgd_targeted", "pgd_adaptive", "vote", "worst_case")
            assert set(robust) == {(a, e) for a in attacks for e in grid} | {("square", 0.15)} and not marginal
        else:  # the ensemble attacks only what the attacks before it left
            attacks = ("fgsm", "apgd", "worst_case")
            assert set(robust) == {(a, e) for a in attacks for e in grid}
            assert marginal == {("apgd_targeted", e) for e in grid[1:]} | {("square", 0.15)}
        for (attack, eps), r in robust.items():
            assert float(r["n"]) == 100 and float(r["ci_low"]) <= r["value"] <= float(r["ci_high"])
            assert robust[("worst_case", eps)]["value"] <= r["value"]
        assert all(robust[(a, 0.0)]["value"] == clean for a in attacks)
        flags = {r["check"]: r["value"] for r in mine if r["metric"] == "sanity_flag"}
        unmeasured = {"minimal_within_bound"} | (set() if model == "capsnet" else {"adaptive_stronger"})
        expected_checks = set(CHECKS) - unmeasured
        assert set(flags) == expected_checks and flags["eps0_equals_clean"] == 0.0
        recomputed = {f.check: float(f.fired) for f in sanity_flags(mine, near_zero=1.0)}
        assert flags == recomputed
        for check, v in flags.items():
            if v:
                assert f"FLAG {model} / mnist seed 0: {check}" in result.output
        assert (out / "figures" / f"adversarial_examples-{model}-s0.png").stat().st_size > 0
    assert max(cleans) > 50.0, f"no smoke model is well above chance: {cleans}"
    assert "vote not run on cnn_sabour" in result.output
    assert "pgd_detect_aware not run on cnn_sabour: the model has no reconstruction decoder" in result.output
    defended = {
        (r["attack"], float(r["eps"])): float(r["value"])
        for r in rows
        if r["model"] == "capsnet" and r["metric"] == "correct_or_detected"
    }
    for eps in grid[1:]:  # the detection-aware attack is at least as strong as its base, which ignores the detector
        assert defended[("pgd_detect_aware", eps)] <= defended[("pgd_adaptive", eps)]
        assert defended[("worst_case", eps)] <= min(v for (a, e), v in defended.items() if e == eps)
    assert (out / "robust_accuracy_vs_eps.pdf").read_bytes()[:4] == b"%PDF"
    assert_vote_surrogate_agrees_with_capsnet(tmp_path / "out" / "checkpoints", mnist_root)


def assert_vote_surrogate_agrees_with_capsnet(cache: Path, root: Path) -> None:
    """Gu et al. (arXiv:2102.10055) attack the votes because their average predicts what the routed output capsules
    predict. On the smoke-trained CapsNet the surrogate must agree with the model on >= 95 % of 1,000 clean test
    images (the quick-budget CapsNet agrees on 99.6 % of 2,000)."""
    (ckpt,) = [
        p
        for p in cache.glob("*.ckpt")
        if not p.name.endswith(".partial.ckpt")
        and torch.load(p, weights_only=True)["meta"]["identity"]["model"] == "capsnet"
    ]
    blob = torch.load(ckpt, weights_only=True)
    model = create_model("capsnet", **blob["meta"]["identity"]["model_args"])
    model.load_state_dict(blob["state_dict"])
    splits = load_splits(
        "mnist", root=root, download=False, val_size=5000, train_subset=None, val_subset=None
    )
    with torch.no_grad():
        images = splits.test_x[:1000].float() / 255.0
        agree = (model.eval()(images).scores.argmax(1) == model.vote_logits(images).argmax(1)).float().mean().item()
    assert agree >= 0.95, f"the vote surrogate agrees with CapsNet on only {100 * agree:.1f} % of clean images"


def test_unknown_attack_fails_with_the_valid_ones_and_writes_nothing(tmp_path):
    result = CliRunner().invoke(
        app, ["run", "suite=robustness", "params.attacks=[pgd,votes]", f"output_dir={tmp_path / 'out'}"]
    )
    assert (
        result.exit_code == 2 and "unknown attack 'votes'" in result.output and "did you mean 'vote'" in result.output
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", [m for m in list_models() if MODELS.get(m).cls.is_capsule])
def test_every_capsule_model_gets_the_adaptive_attacks_and_a_worst_case(name):
    torch.manual_seed(0)
    records = measure(create_model(name, **tiny_args(name)).eval(), FEW_STEPS)
    attacks = {r["attack"] for r in records if r["metric"] in ("robust_accuracy", "marginal_breaks")}
    skipped = {r["attack"]: r["reason"] for r in records if r["metric"] == "attack_skipped"}
    assert {"apgd", "apgd_targeted", "pgd_adaptive", "worst_case"} <= attacks
    assert "vote" in attacks or (name == "srcapsnet" and "uniform coupling" in skipped["vote"])


@pytest.mark.parametrize("budget", ["smoke", "quick", "paper"])
def test_robustness_reuses_the_accuracy_suites_checkpoints(tmp_path, budget):
    from capsbench.suites import SUITES
    from capsbench.train.trained import training_identity

    splits = make_splits()
    identities = []
    for suite in ("accuracy", "robustness"):
        cfg = compose([f"suite={suite}", f"budget={budget}", f"output_dir={tmp_path}"])
        identities.append([training_identity(cfg, m, 0, splits, SUITES.get(suite)().protocol(cfg)) for m in cfg.models])
    assert identities[0] == identities[1]


@pytest.mark.parametrize("name", ["capsnet", "effcapsnet"])
def test_no_attack_forward_runs_the_reconstruction_decoder_and_the_records_are_unchanged(name, monkeypatch):
    """The decoder is read by no attack's loss or decision: attacks run without it (0 decoder calls), and every
    record is what the same attacks give with the decoder attached."""
    import capsbench.suites.robustness.suite as suite_module

    torch.manual_seed(0)
    model = create_model(name, **tiny_args(name)).eval()
    calls = []
    model.decoder.register_forward_hook(lambda *_: calls.append(1))
    fast = measure(model, FEW_STEPS)
    assert calls == [] and model.decoder is not None  # detached while attacking, attached again after
    monkeypatch.setattr(suite_module, "without_unused_heads", lambda m: contextlib.nullcontext())
    slow = measure(model, FEW_STEPS)
    assert calls  # the decoder ran this time

    def kept(records):
        return sorted((r["metric"], str(r.get("attack")), str(r.get("eps")), str(r.get("check")), r.get("outcomes"),
                       r["value"]) for r in records if r["metric"] != "attack_throughput")

    assert kept(fast) == kept(slow)


def test_long_apgd_steps_apply_from_their_eps_and_are_stated():
    """attack_args.apgd.long_steps: APGD's passes at eps >= long_eps get the longer schedule (where a short one leaves
    the CNNs' last images to an independent 100-step attack), declared in the work and stated in the budget line."""
    from capsbench.attacks import build
    from capsbench.suites.robustness.params import EpsGrid
    from capsbench.suites.robustness.suite import budget_lines

    def params(**apgd):
        return RobustnessParams(attacks=["fgsm", "apgd"], ensemble=[], attack_args={"apgd": {"steps": 25, **apgd}})

    short, long = params(), params(long_steps=100, long_eps=0.15)
    longer = build("apgd", long.attack_args["apgd"])
    assert [p.steps for p in longer.passes(0.1, 10)] == [25] and [p.steps for p in longer.passes(0.15, 10)] == [100]
    grid = EpsGrid([0.0, 0.1, 0.15, 0.2], None)
    more, fewer = attack_passes(long, grid, 10), attack_passes(short, grid, 10)
    assert more == fewer + 2 * 75 * 2  # eps 0.15 and 0.2: 75 more iterates, each a forward and a backward pass
    records = [{"model": "m", "dataset": "mnist", "metric": "robust_accuracy", "attack": "apgd"}]
    (line,) = budget_lines(records, OmegaConf.structured(long))
    assert "25 steps" in line and "100 steps at eps >= 0.15" in line


def test_a_units_progress_gives_each_phase_the_share_it_took_and_reaches_its_end_only_at_its_end(monkeypatch):
    """The fixed-eps attacks declare a ceiling that early exit undercuts; the minimum-norm attacks run every step on
    every image. The unit's share done is passes done over passes done plus those still to do: the fixed-eps attacks
    end at the share they took (below the one they declared), then each minimum-norm attack moves it batch by batch,
    and it is whole only at the unit's end."""
    monkeypatch.setattr(MinimalAttack, "BATCH", 16)
    args = {**FEW_STEPS, "fmn": {"steps": 5}, "fab": {"steps": 3}}
    credited: list[float] = []
    with on_measured(credited.append):
        records = measure(BandModel(), args, minimal=["fmn", "fab"])
    params = band_params(args, minimal=["fmn", "fab"])
    n, per_image = 48, attack_passes(params, eps_grid(params, "synthetic"), 10)
    fmn, fab = n * (2 * 2 * 5 + 10), n * 3 * 11  # FMN: two starts of a forward and a backward per step, and a
    # 10-step boundary search; FAB: a forward and every class's gradient per step
    assert credited == sorted(credited) and credited[-1] == pytest.approx(n * (1 + per_image))
    share = [(c / n - 1) / per_image for c in credited]  # each credit: the clean pass, then the attacks' share
    (clean,) = [r for r in records if r["metric"] == "clean_accuracy"]
    attacked = round(clean["value"] * clean["n"] / 100)  # every clean-correct image, in batches of 16
    batches = [min(attacked, stop) / attacked for stop in range(16, attacked + 16, 16)]
    assert len(batches) >= 2
    ended = share[-2 * len(batches) - 1]  # the fixed-eps attacks' end: fixed / (fixed + fmn + fab)
    fixed = ended * (fmn + fab) / (1 - ended)
    assert 0 < fixed < n * per_image - fmn - fab  # early exit ended rows: fewer passes than declared
    expected = [(fixed + fmn * b) / (fixed + fmn + fab) for b in batches]
    expected += [(fixed + fmn + fab * b) / (fixed + fmn + fab) for b in batches]
    assert share[-len(expected):] == pytest.approx(expected)
