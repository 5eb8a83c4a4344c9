"""benchmarks/square_check.py holds capsbench's Square against torchattacks.Square: both at the same budget, judged by
the model's own decision, and summarised with intervals and a result line that says whether they agree."""

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
from test_attacks import tiny_model

from capsbench.attacks import decisions

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCHMARKS))  # it imports attack_speed's training, as it does run from there
    try:
        spec = importlib.util.spec_from_file_location("square_check", BENCHMARKS / "square_check.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCHMARKS))
    return module


def test_both_squares_get_the_same_budget(bench):
    import torchattacks

    ours, theirs = bench.attacks(queries=70, p_init=0.5).values()
    assert ours.budget(10) == "70 queries, margin loss, 1 restart, p_init 0.5"
    built = theirs.build(torch.nn.Linear(1, 1), 0.1, bench.EngineSettings(num_classes=10, seed=3))
    assert isinstance(built, torchattacks.Square)
    assert (built.n_queries, built.p_init, built.loss, built.n_restarts, built.seed, built.eps, built.norm) == (
        70, 0.5, "margin", 1, 3, 0.1, "Linf")


def test_both_squares_stay_in_the_ball_and_are_judged_by_the_model(bench):
    model = tiny_model("capsnet")
    images = torch.rand(6, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    labels = decisions(model, images)
    for attack in bench.attacks(queries=20).values():
        result = bench.run(attack, model, images, labels, list(range(100, 106)), [0.05])
        adv = result.adversarial[0.05]
        assert (adv - images).abs().max() <= 0.05 + 1e-6 and adv.min() >= 0 and adv.max() <= 1
        assert torch.equal(result.broken[0.05].cpu(), decisions(model, adv) != labels)


def test_the_summary_gives_intervals_and_whether_capsbench_lies_in_torchattacks_interval(bench):
    ours = torch.tensor([True] * 40 + [False] * 60)
    theirs = torch.tensor([True] * 35 + [False] * 60 + [True] * 5)
    detail, line = bench.summary("capsnet", 0.1, ours, theirs)
    assert "capsbench Square 60.0 % [" in detail and "torchattacks Square 60.0 % [" in detail
    assert "only by capsbench's 5, only by torchattacks' 5" in detail
    assert line == "square_check capsnet eps=0.1 capsbench=60.0 torchattacks=60.0 within_interval=yes"
    far = torch.zeros(100, dtype=torch.bool)  # torchattacks breaks nothing: 100.0 [96.3, 100.0]
    assert bench.summary("capsnet", 0.1, ours, far)[1].endswith("torchattacks=100.0 within_interval=no")
