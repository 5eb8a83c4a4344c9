"""benchmarks/train_speed.py compares speed, not maths: its reference computes capsbench's loss at identical weights."""

import importlib.util
from pathlib import Path

import pytest
import torch
from composing import compose

from capsbench.models import create_model

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "train_speed.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("train_speed", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TINY = {
    "capsnet": {"conv_channels": 8, "primary_types": 2, "primary_dim": 4, "class_dim": 6, "decoder_hidden": [16, 24]},
    "cnn_sabour": {"channels": [4, 4, 2], "fc": [12, 8]},
}


@pytest.mark.parametrize("name", ["capsnet", "cnn_sabour"])
def test_reference_loss_and_gradients_equal_capsbench_at_identical_weights(bench, name):
    args = bench.quick_args(name, "smoke")
    args.update(TINY[name])
    torch.manual_seed(0)
    model = create_model(name, **args).double().eval()  # eval: dropout off in both
    ref = bench.reference_for(name, model, args).double().eval()
    images, labels = torch.rand(5, 1, 28, 28, dtype=torch.float64), torch.tensor([0, 3, 3, 7, 9])
    ours = model.loss(model(images, labels), labels, images)
    theirs = ref.loss(images, labels)
    assert torch.allclose(ours, theirs, rtol=1e-12, atol=0)
    ours.backward()
    theirs.backward()
    assert torch.allclose(
        model.conv.weight.grad if name == "capsnet" else model.features[0].weight.grad,
        ref.conv.weight.grad if name == "capsnet" else ref.features[0].weight.grad,
        rtol=1e-9,
        atol=1e-12,
    )


def test_sizes_follow_the_budget(bench):
    quick = compose(["budget=quick"], require_suite=False).model_args
    assert bench.quick_args("capsnet", "quick")["conv_channels"] == quick.capsnet.conv_channels
    assert bench.quick_args("cnn_sabour", "quick")["channels"] == list(quick.cnn_sabour.channels)
