"""The row engine against a plain sequential reference: the same per-image outcomes (attacks reported alone, the
ensemble's marginal breaks, the worst case) on tiny trained models with the same random starts, whatever the pool's
width, reads and speculation; the sync counter's known answers and the engine's iterate at 0; an attack declared with
a setting and a step rule of its own runs through the CLI with no other file touched."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch
from conftest import fit_on_bands, make_splits
from torch.nn import functional as F

from capsbench import create_model
from capsbench.attacks import CATALOG, AttackEntry, EngineSettings, decisions
from capsbench.attacks.base import start_noise
from capsbench.attacks.losses import dlr, margin, targeted_dlr
from capsbench.attacks.objectives import raw_evidence
from capsbench.attacks.step_rules import MOMENTUM, RHO, checkpoints
from capsbench.cost.syncs import SyncCounter
from capsbench.data import batches
from capsbench.suites.robustness.phases import UnitAttacks, planned

GRID = [0.0, 0.05, 0.1, 0.2]
STEPS = 8
ARGS = {"apgd": {"steps": STEPS}, "apgd_targeted": {"steps": STEPS}}
PARAMS = type("P", (), {"attacks": ["fgsm", "apgd"], "ensemble": ["apgd_targeted"], "extra_attacks": []})


@functools.lru_cache(maxsize=2)
def trained(name: str):
    """A tiny model trained on the synthetic band images, with 64 test images and labels."""
    splits = make_splits(n_train=512, n_test=64)
    torch.manual_seed(0)
    args = {"cnn_9x9": {"channels": (8, 8, 4), "fc": (32,), "dropout": 0.0},
            "capsnet": {"conv_channels": 8, "primary_types": 2, "primary_dim": 4, "class_dim": 4,
                        "decoder_hidden": (16,)}}[name]
    model = create_model(name, in_channels=1, image_size=splits.spec.image_size, num_classes=10, **args)
    model = fit_on_bands(model, splits, epochs=3)
    images, labels = next(batches(splits.test_x, splits.test_y, 64))
    return model, images, labels


# --- the reference: each attack as a plain loop over one batch, eps by eps, pass by pass --------------------------
def plain_fgsm(model, images, labels, eps):
    x = images.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(F.cross_entropy(model(x).logits, labels, reduction="sum"), x)
    adv = (images + eps * g.sign()).clamp(0, 1)
    return (decisions(model, images) != labels) | (decisions(model, adv) != labels)


def plain_apgd(model, images, labels, ids, eps, loss, seed, stream, target=None):
    """APGD as written in Croce and Hein's sec. 3, all rows to the last step (a row is broken when any iterate is)."""
    noise = start_noise(ids, tuple(images.shape[1:]), seed=seed, stream=stream, device="cpu")
    lower, upper = (images - eps).clamp(min=0), (images + eps).clamp(max=1)
    x = torch.min(torch.max(images + noise * eps, lower), upper)
    eta = torch.full((len(x),), 2 * eps)
    value = best = best_mark = torch.full((len(x),), -math.inf)
    rises, halved, last = torch.zeros(len(x)), torch.ones(len(x), dtype=torch.bool), 0
    before, x_best, g_best = x.clone(), x.clone(), torch.zeros_like(x)
    broken = torch.zeros(len(x), dtype=torch.bool)
    marks = set(checkpoints(STEPS))
    for t in range(STEPS + 1):
        xs = x.clone().requires_grad_(True)
        out = model(xs)
        e = raw_evidence(out)
        broken |= out.scores.argmax(1) != labels
        f = dlr(e, labels) if loss == "dlr" else targeted_dlr(e, labels, target) if target is not None \
            else margin(e, labels)
        (g,) = torch.autograd.grad(f.sum(), xs)
        f = f.detach()
        if t == STEPS:
            break
        rises, value = rises + (f > value).float(), f
        better = f > best
        best = torch.where(better, f, best)
        x_best, g_best = torch.where(better[:, None, None, None], x, x_best), torch.where(
            better[:, None, None, None], g, g_best)
        if t in marks:
            stalled = (rises < RHO * (t - last)) | (~halved & (best <= best_mark))
            eta, value = torch.where(stalled, eta / 2, eta), torch.where(stalled, best, value)
            halved, best_mark, rises, last = stalled, best.clone(), torch.zeros(len(x)), t
            x, g = torch.where(stalled[:, None, None, None], x_best, x), torch.where(
                stalled[:, None, None, None], g_best, g)
        alpha = 1.0 if t == 0 else MOMENTUM
        z = torch.min(torch.max(x + eta[:, None, None, None] * g.sign(), lower), upper)
        moved = x + alpha * (z - x) + (1 - alpha) * (x - before)
        before, x = x, torch.min(torch.max(moved, lower), upper)
    return broken


def reference(model, images, labels):
    """Per attack and eps which images the plain loops break: FGSM and APGD on every clean-correct image; APGD-T, eps
    by eps and target by target, on what every earlier attack (and itself at smaller eps) left."""
    ids = list(range(len(images)))
    ok = decisions(model, images) == labels
    broken = {"fgsm": {}, "apgd": {}, "apgd_targeted": {}}
    for eps in GRID:
        broken["fgsm"][eps] = plain_fgsm(model, images, labels, eps) & ok
        broken["apgd"][eps] = plain_apgd(model, images, labels, ids, eps, "margin", 0, "margin/0") & ok
    with torch.no_grad():
        others = raw_evidence(model(images)).scatter(1, labels[:, None], float("-inf")).argsort(1, descending=True)
    so_far = torch.zeros(len(images), dtype=torch.bool)
    for eps in [e for e in GRID if e > 0]:
        so_far |= broken["fgsm"][eps] | broken["apgd"][eps]
        hit = torch.zeros(len(images), dtype=torch.bool)
        for rank in range(1, 10):
            todo = ok & ~so_far & ~hit
            if todo.any():
                rows = todo.nonzero().squeeze(1)
                hit[rows] = plain_apgd(model, images[rows], labels[rows], rows.tolist(), eps, "targeted", 0,
                                       f"targeted_dlr{rank}/0", target=others[rows, rank - 1])
        broken["apgd_targeted"][eps] = hit
        so_far |= hit
    return ok.numpy(), {a: {e: m.numpy() for e, m in d.items()} for a, d in broken.items()}


@pytest.mark.parametrize("name", ["cnn_9x9", "capsnet"])
@pytest.mark.parametrize("rows,every,speculate", [(500, 1, False), (4096, 8, True), (7, 3, True)])
def test_the_pooled_engine_breaks_the_images_the_plain_loops_break(name, rows, every, speculate):
    model, images, labels = trained(name)
    ok, expected = reference(model, images, labels)
    settings = EngineSettings(num_classes=10, batch_size=rows, compact_every=every, speculate=speculate)
    run = UnitAttacks(model, images, labels, ok, GRID, settings, ARGS)
    run.run(planned(PARAMS, GRID, None))
    for attack in ("fgsm", "apgd"):
        for eps in GRID:
            np.testing.assert_array_equal(run.broken[attack][eps], expected[attack][eps], f"{attack} at {eps}")
    for eps in [e for e in GRID if e > 0]:  # APGD-T's marginal breaks: what it broke that nothing before it did
        earlier = np.logical_or.reduce([expected[a][e] for a in ("fgsm", "apgd") for e in GRID if 0 < e <= eps]
                                       + [expected["apgd_targeted"][e] for e in GRID if 0 < e < eps])
        np.testing.assert_array_equal(run.broken["apgd_targeted"][eps] & ~earlier, expected["apgd_targeted"][eps])
    assert sum(m.sum() for d in expected.values() for m in d.values()) > 0  # the reference breaks something


# --- the sync counter ------------------------------------------------------------------------------------------
def test_the_sync_counter_counts_each_operation_that_makes_the_host_wait():
    x = torch.randn(16)
    with SyncCounter() as syncs:
        x[x > 0]  # boolean-mask indexing: its size depends on the values
        x.sum().item()
        bool((x > 0).any())
        x.tolist()
        torch.nonzero(x)
        x.unique()
        torch.where(x > 0, x, 0.0)  # fixed shapes: none
        x[torch.arange(4)]
    assert dict(syncs.counts) == {"bool_index": 1, "item": 1, "bool": 1, "tolist": 1, "nonzero": 1, "unique": 1}


def test_an_iterate_of_the_engine_makes_the_host_wait_for_nothing():
    from capsbench.attacks import build
    from capsbench.attacks.engine import RowEngine
    from capsbench.attacks.schedule import Job

    model, images, labels = trained("cnn_9x9")
    ok, _ = reference(model, images, labels)
    engine = RowEngine(model, images, labels, range(len(images)), GRID,
                       EngineSettings(num_classes=10, batch_size=4096, compact_every=4, speculate=True))
    attack = build("apgd_targeted", ARGS["apgd_targeted"])
    counted = []
    real = engine._iterate

    def counting(pool):
        with SyncCounter() as syncs:
            real(pool)
        counted.append(syncs.total)

    engine._iterate = counting
    engine.run([Job("apgd_targeted", attack, GRID[1:], ok, False, {e: attack.passes(e, 10) for e in GRID[1:]})])
    assert len(counted) > 8 and set(counted) == {0}


# --- an attack of one's own, with a setting and a step rule -----------------------------------------------------
MOMENTUM_ATTACK = '''
"""`mifgsm`: momentum iterative FGSM (Dong et al., arXiv:1710.06081): sign steps along an accumulated gradient."""

from dataclasses import dataclass
from typing import ClassVar

from capsbench.attacks.base import Pass, RowAttack
from capsbench.attacks.objectives import Objective
from capsbench.attacks.step_rules import StepRule, per_row, project


@dataclass(frozen=True)
class MomentumStep(StepRule):
    decay: float
    state: ClassVar[dict[str, str]] = {"velocity": "image", "step_size": "float"}

    def start(self, s, eps, steps):
        s["velocity"].zero_()
        s["step_size"].copy_(eps / steps)

    def advance(self, s, f, g):
        norm = g.abs().flatten(1).sum(1).clamp(min=1e-12)
        s["velocity"].copy_(self.decay * s["velocity"] + g / per_row(norm, g))
        return project(s["x"] + per_row(s["step_size"], g) * s["velocity"].sign(), s["lower"], s["upper"])


class MIFGSM(RowAttack):
    """Ten sign steps of eps / 10 along the momentum of the cross-entropy's gradient."""

    name = "mifgsm"
    attacks = "the model's attack logits"
    LABEL = "MI-FGSM"
    ORDER = 65
    ARGUMENT_RANGES = {"decay": "[0, inf)"}

    def __init__(self, *, decay: float = 1.0) -> None:
        self.decay = decay

    def budget(self, num_classes):
        return f"10 steps of eps/10, momentum decay {self.decay:g}"

    def passes(self, eps, num_classes, norm):
        return [Pass(Objective(), "ce", MomentumStep(self.decay), 10, random_start=False)]
'''


def test_an_attack_with_a_setting_of_its_own_runs_through_the_cli_with_no_other_file_touched(
        tmp_path, monkeypatch, mnist_root):
    from typer.testing import CliRunner

    from capsbench.cli import app

    (tmp_path / "my_attacks.py").write_text(MOMENTUM_ATTACK)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(CATALOG._entries, "mifgsm", AttackEntry("my_attacks:MIFGSM"))
    common = ["run", "suite=robustness", "budget=smoke", "models=[cnn_9x9]", "data.test_subset=30",
              f"data.root={mnist_root}", f"output_dir={tmp_path / 'out'}", "params.attacks=[fgsm,mifgsm]",
              "params.ensemble=[]", "tracking.enabled=false"]
    refused = CliRunner().invoke(app, [*common, "params.attack_args.mifgsm.decay=-1"])
    assert refused.exit_code == 2 and "params.attack_args.mifgsm.decay must be a number >= 0" in refused.output
    in_l2 = CliRunner().invoke(app, [*[a.replace("suite=robustness", "suite=robustness_l2") for a in common]])
    assert in_l2.exit_code == 2 and "attack 'mifgsm' has no l2 form (it has: linf)" in in_l2.output
    result = CliRunner().invoke(app, [*common, "params.attack_args.mifgsm.decay=0.5"])
    assert result.exit_code == 0, result.output
    table = (tmp_path / "out" / "robustness" / "table.md").read_text()
    assert "| MI-FGSM |" in table and "mifgsm (10 steps of eps/10, momentum decay 0.5)" in table
