"""benchmarks/attack_speed.py compares speed, not results: its plain PGD loop breaks exactly the images capsbench's
breaks."""

import importlib.util
from pathlib import Path

import pytest
import torch
from test_models import tiny_args

from capsbench import create_model
from capsbench.attacks import decisions

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "attack_speed.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("attack_speed", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # 3 x 2 x 21 passes of capsnet: ~10 s idle, half a minute on a busy 2-core machine
def test_plain_loop_and_capsbench_break_the_same_images(bench):
    torch.manual_seed(0)
    model = create_model("capsnet", **tiny_args("capsnet")).eval()
    images = torch.rand(12, 1, 28, 28)
    labels, ids = decisions(model, images), torch.arange(100, 112)
    plain = bench.plain_pgd(model, images, labels, ids, seed=0, eps=0.005)  # the untrained model breaks easily
    assert 0 < int(plain.sum()) < len(images), "the known answer needs both outcomes"
    for early_exit in (False, True):
        assert torch.equal(bench.capsbench_pgd(model, images, labels, ids, 0, early_exit=early_exit, eps=0.005), plain)
