"""Progress that tells the truth: off a terminal each status line once and a line at least every LOG_EVERY seconds of
work, time left from the work done (not counts), none with --quiet; the row engine reports at every read of the
device (every iterate on a CPU) and torchattacks' attacks every batch of images, adding up to their declared total;
an attack phase credits the work it forwarded, never ahead of it, and reaches its end only at its end; priced work's
time left starts at the price and learns the rate seen; log lines go through tqdm's redirect; the units' work is
declared per unit."""

import logging
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
import torchattacks
from composing import compose
from test_attacks import SETTINGS, attack, tiny_model

from capsbench.attacks import build, decisions
from capsbench.attacks.torchattacks_adapters import LibraryAttack
from capsbench.run.cost_model import plan_work, training_work
from capsbench.run.plan import plan
from capsbench.suites.robustness.phases import UnitAttacks, planned
from capsbench.util import progress
from capsbench.util.pace import TRUST_SECONDS, Pace
from capsbench.util.progress import Progress, redirect_logging

LOGGER = "capsbench.util.progress"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(progress.time, "monotonic", c)
    return c


def test_each_status_is_logged_once_with_the_time_left_from_the_work_done(caplog, clock):
    with caplog.at_level(logging.INFO, logger=LOGGER), Progress("units", 100.0) as bar:
        bar.note("0/3 done")
        clock.now += 10
        bar.update(25, status="1/3 done, last capsnet")  # a quarter of the work in 10 s: 30 s left
    assert caplog.messages == [
        "units: 0/3 done, 0 % done, 0 s elapsed",
        "units: 1/3 done, last capsnet, 25 % done, 10 s elapsed, about 30 s left",
    ]


def test_off_a_terminal_a_line_comes_at_least_every_log_every_seconds_of_work(caplog, clock):
    with caplog.at_level(logging.INFO, logger=LOGGER), Progress("units", 4.0) as outer:
        outer.note("0/4 done")
        with Progress("attacks capsnet s0", 200.0, count="row-steps") as inner:
            inner.note("2/5 pgd on 980 images x 7 eps")
            caplog.clear()
            clock.now += progress.LOG_EVERY - 1
            inner.update(50)
            inner.show("512 rows left")
            progress.tick()
            assert caplog.messages == []  # a line came less than LOG_EVERY seconds ago
            clock.now += 1
            progress.tick()
            progress.tick()  # and not again at once
    assert caplog.messages == [
        "units: 0/4 done, 0 % done, 30 s elapsed | attacks capsnet s0: 2/5 pgd on 980 images x 7 eps, 512 rows left, "
        "25 % done (50/200 row-steps), 30 s elapsed, about 1.5 min left"
    ]


def test_a_reset_starts_the_next_piece_of_work_and_quiet_prints_nothing(caplog, clock):
    with caplog.at_level(logging.INFO, logger=LOGGER), Progress("attacks", None, count="row-steps") as bar:
        assert bar.line() == "attacks: 0 row-steps done, 0 s elapsed"
        bar.reset(10)
        bar.update(10)
        bar.add_total(10)
        assert bar.line() == "attacks: 50 % done (10/20 row-steps), 0 s elapsed, about 0 s left"
    caplog.clear()
    progress.set_quiet(True)
    try:
        with caplog.at_level(logging.INFO, logger=LOGGER), Progress("attacks", 2) as bar:
            bar.note("fgsm")
            bar.update(2)
            clock.now += 10 * progress.LOG_EVERY
            progress.tick()
            assert not bar.shown
    finally:
        progress.set_quiet(False)
    assert caplog.messages == []


def test_log_lines_go_through_tqdm_while_bars_may_be_open():
    root = logging.getLogger()
    with redirect_logging():
        assert any(type(h).__name__ == "_TqdmLoggingHandler" for h in root.handlers)
    assert not any(type(h).__name__ == "_TqdmLoggingHandler" for h in root.handlers)


def follow():
    calls: list[tuple[int, int, int]] = []
    return calls, lambda done, total, left: calls.append((done, total, left))


@pytest.mark.parametrize("early_exit", [True, False])
@pytest.mark.parametrize("name", ["pgd", "fgsm"])
def test_pgd_reports_every_step_and_adds_up_to_its_total_without_changing_a_result(name, early_exit):
    model = tiny_model("cnn_sabour")
    images = torch.rand(8, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    labels = decisions(model, images)  # every image classified correctly clean
    eps = [0.0, 0.002, 0.05]  # some rows survive some steps, some break early
    steps = 1 if name == "fgsm" else 4
    plain = replace(SETTINGS, batch_size=10, early_exit=early_exit)
    calls, hook = follow()
    a = attack(name, model, images, labels, eps, plain, **({} if name == "fgsm" else {"steps": steps}))
    b = attack(name, model, images, labels, eps, replace(plain, progress=hook),
               **({} if name == "fgsm" else {"steps": steps}))
    assert all(torch.equal(a.broken[e], b.broken[e]) and torch.equal(a.adversarial[e], b.adversarial[e]) for e in eps)
    runs = len(build(name).passes(0.1, 10))  # pgd: cross-entropy, then margin
    total = len(images) * len(eps) * runs * (steps + 1)  # row-steps declared: each row's iterates 0..steps
    assert {t for _, t, _ in calls} == {total}
    done = [d for d, _, _ in calls]
    assert done == sorted(done) and done[-1] == total  # moves forward only, and ends at its total
    assert max(left for *_, left in calls) <= 10  # the pool's rows at most
    assert len(calls) >= runs * (steps + 1)  # at every iterate of the pool (a read every iterate on a CPU)


def test_an_attack_phase_credits_what_it_forwarded_and_reaches_its_end_only_at_its_end():
    """FGSM, APGD, then APGD-T towards every other class on what they left, in one pool: at eps 0.3 every image breaks
    at once and its APGD-T rows are cancelled, which the declared row-steps counted as done at once."""
    model = tiny_model("cnn_sabour")
    images = torch.rand(12, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    labels = decisions(model, images)
    grid = [0.0, 0.002, 0.3]
    calls, hook = follow()
    shares: list[float] = []
    params = type("P", (), {"attacks": ["fgsm", "apgd"], "ensemble": ["apgd_targeted"], "extra_attacks": []})
    run = UnitAttacks(model, images, labels, np.ones(12, dtype=bool), grid,
                      replace(SETTINGS, batch_size=30, early_exit=True, progress=hook),
                      {"apgd": {"steps": 4}, "apgd_targeted": {"steps": 4}})
    run.run(planned(params, grid, None), work=lambda done, total: shares.append(done / total))
    done = [d for d, _, _ in calls]
    assert done[-1] == run.counts.row_steps  # the row-steps the engine forwarded, by its own count
    assert all(b > a for a, b, (*_, rows) in zip(done, done[1:], calls) if rows)  # moves whenever rows ran
    assert shares == sorted(shares) and shares[-1] == 1.0 and max(shares[:-1]) < 1.0
    assert all(share <= d / done[-1] + 1e-12 for share, d in zip(shares, done))  # never ahead of the work done
    assert [t for _, t, _ in calls] == sorted((t for _, t, _ in calls), reverse=True)  # cancels shrink the total


class LibraryFGSM(LibraryAttack):
    """torchattacks' FGSM through capsbench's adapter for library attacks, in batches of 4 images."""

    batch = 4

    def build(self, target, eps, settings):
        return torchattacks.FGSM(target, eps=eps)


def test_torchattacks_attacks_report_every_batch_of_images():
    model = tiny_model("cnn_sabour")
    x = torch.rand(6, 1, 28, 28)
    y = torch.arange(6) % 10
    calls, hook = follow()
    LibraryFGSM().run(model, x, y, torch.arange(6), [0.1, 0.2], replace(SETTINGS, progress=hook))
    assert calls == [(4, 12, 8), (6, 12, 6), (10, 12, 2), (12, 12, 0)]


def test_units_are_weighed_by_their_declared_work(tmp_path):
    cfg = compose(["suite=robustness", "budget=smoke", "models=[capsnet,cnn_sabour]", "seeds=[0,1]",
                   f"output_dir={tmp_path}", "device=cpu"])
    accuracy = compose(["suite=accuracy", "budget=smoke", "models=[capsnet]", "seeds=[0]", f"output_dir={tmp_path}",
                        "device=cpu"])
    units = plan(accuracy) + plan(cfg)
    work = plan_work(units)
    # smoke: 3 epochs of 3,000 training images, a training step ~ 3 passes
    assert training_work(units[0]) == 3 * 3000 * 3
    # accuracy's capsnet seed 0 trains it; robustness's capsnet seed 0 shares that checkpoint; seed 1 trains its own
    trains = [w.train > 0 for w in work.values()]
    assert trains == [True, False, True, True, True]
    assert work[units[0].key].measure == 500  # accuracy: one pass over smoke's 500 test images
    # robustness: 100 test images x (1 + fgsm's step and apgd's 5 steps, a forward and a backward pass per iterate
    # (steps + 1) at each of 7 eps; the ensemble's 5-step passes of apgd_targeted (9 targets), pgd_adaptive (5 + 9)
    # and vote (2) at the 6 eps above 0; square's first query and 50 more, forwards only, at its one eps)
    one_pass = 2 * (5 + 1)
    assert work[units[1].key].measure == 100 * (1 + 7 * 2 * 2 + 7 * one_pass + 6 * one_pass * (9 + 14 + 2) + 51)


def test_priced_time_left_starts_at_the_price_and_converges_to_the_rate_seen(clock):
    """Work priced at 100,000 s runs at half the priced speed (a loaded machine): the time left starts at the price and
    its error shrinks to the true time left as the run shows its rate; it never reads 0 while work is left."""
    total = 100_000.0
    with Progress("units", total, pace=Pace.priced(total, total)) as bar:
        assert bar.left() == pytest.approx(total)
        assert bar.line() == "units: 0 % done, 0 s elapsed, about 1666.7 min left"
        errors = []
        for _ in range(40):
            clock.now += 500
            bar.update(250)
            truth = (total - bar.done) / 0.5
            errors.append(abs(bar.left() - truth) / truth)
            assert bar.left() > 0
    assert errors == sorted(errors, reverse=True) and errors[-1] < 0.03
    assert Pace.priced(total, total).speed(10_000, 20_000) == pytest.approx(0.5, rel=0.02)
    assert Pace.priced(total, total).trust == TRUST_SECONDS
    assert Pace.priced(60.0, 60.0).trust == 30.0  # a short run trusts its price for half of it


def test_a_bar_on_a_terminal_shows_the_priced_time_left(clock, monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    with Progress("units", 600.0, pace=Pace.priced(600.0, 600.0)) as bar:
        assert "<10:00" in str(bar._bar)  # before any work: the price, where tqdm alone would print "?"
        clock.now += 100
        bar.update(50)
        assert f"<{bar._bar.format_interval(bar.left())}" in str(bar._bar)


def test_units_are_credited_as_they_report_and_never_beyond_their_work():
    from capsbench.run.cost_model import Credits, Work
    from capsbench.run.units import UnitEvent, UnitResult, UnitSpec

    spec = UnitSpec("robustness", "capsnet", 0, {}, {"train": {"epochs": 4}, "dataset": "mnist", "data": {}})
    credits = Credits({spec.key: Work(400.0, 1000.0)}, [spec])
    epoch = [credits.event(UnitEvent(spec.key, "epoch", {"epoch": e})) for e in (1, 2, 2, 4)]
    assert epoch == [100.0, 100.0, 0.0, 200.0]  # each epoch its share of the training, once
    measured = [credits.event(UnitEvent(spec.key, "measured", {"passes": p})) for p in (100, 600, 500, 5000)]
    assert measured == [100.0, 500.0, 0.0, 400.0]  # passes so far, never back, never beyond the declared work
    assert credits.finished(UnitResult(spec.key, spec, "done")) == 0.0
    assert credits.event(UnitEvent("elsewhere", "measured", {"passes": 1})) == 0.0


def test_a_resumed_training_is_declared_and_credited_by_the_epochs_it_has_left(tmp_path, mnist_root):
    """A run stopped after 2 of 4 epochs: the next plan declares the 2 epochs left (retrain=true: all 4), the resumed
    training's epochs 3 and 4 credit half of that each, and the unit's training is credited once in all."""
    from capsbench.run.cost_model import Credits
    from capsbench.run.units import UnitEvent, UnitResult
    from capsbench.train.checkpoints import CheckpointCache

    args = ["suite=accuracy", "budget=smoke", "models=[cnn_9x9]", "train.epochs=4", f"output_dir={tmp_path}",
            f"data.root={mnist_root}", "device=cpu", "threads=1"]
    (unit,) = plan(compose(args))
    full = training_work(unit)
    cache = CheckpointCache(unit.config["cache_dir"])
    cache.save_partial(unit.checkpoint, {"model": {}, "epoch": 1})  # the state after epoch 2 (0-based 1)
    work = plan_work([unit])
    assert work[unit.key].train == full / 2
    assert plan_work(plan(compose([*args, "retrain=true"])))[unit.key].train == full
    credits = Credits(work, [unit])
    assert [credits.event(UnitEvent(unit.key, "epoch", {"epoch": e})) for e in (3, 4)] == [full / 4, full / 4]
    assert credits.finished(UnitResult(unit.key, unit, "done")) == work[unit.key].measure
    cache.save(unit.checkpoint, {"state_dict": {}, "meta": {}})  # finished: the resumable state and its count go
    assert not list(Path(unit.config["cache_dir"]).glob("*.partial.*")) and plan_work([unit])[unit.key].train == 0.0


def test_a_checkpoint_in_the_cache_is_declared_without_training(tmp_path, mnist_root):
    from capsbench.run.execute import trained
    from capsbench.run.plan import training_unit

    cfg = compose(["suite=accuracy", "budget=smoke", "models=[cnn_9x9]", "train.epochs=1", f"output_dir={tmp_path}",
                   f"data.root={mnist_root}", "device=cpu", "threads=1"])
    (unit,) = plan(cfg)
    assert plan_work([unit])[unit.key].train > 0
    trained(training_unit(cfg, "cnn_9x9", 0))  # the checkpoint the unit needs, now in the cache
    assert plan_work([unit])[unit.key].train == 0.0


def test_evaluate_shows_progress_unless_told_not_to(tmp_path, monkeypatch, capfd):
    from conftest import make_splits

    import capsbench
    from capsbench.run import execute

    monkeypatch.setattr(execute, "load_data", lambda dataset, data: make_splits())
    args = dict(suite="accuracy", budget="smoke", output_dir=str(tmp_path), device="cpu", tracking={"enabled": False},
                train={"epochs": 1})
    capsbench.evaluate("cnn_9x9", **args)
    err = capfd.readouterr().err
    assert "units:" in err and "\r" not in err  # plain lines, for stderr is no terminal (nor a notebook) here
    capsbench.evaluate("cnn_9x9", progress=False, remeasure=True, **args)
    assert "units:" not in capfd.readouterr().err


def test_bars_asked_for_off_a_terminal_write_no_cursor_codes(capsys):
    """capsbench.evaluate asks for bars (a notebook shows them); in a script whose stderr goes to a file there is no
    notebook, and the progress must come as plain lines, never tqdm's carriage returns and cursor codes."""
    with progress.shown(True):
        with progress.Progress("attacks", 10, unit="row-step") as bar:
            bar.update(10)
    err = capsys.readouterr().err
    assert "\r" not in err and "\x1b[" not in err
