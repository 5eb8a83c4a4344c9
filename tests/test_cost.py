"""Timing (slope fit), precision options, peak-memory probe and the routing benchmark's two formulations."""

import time

import pytest
import torch
from torch import nn

from capsbench import create_model
from capsbench.cost import routing_bench as rb
from capsbench.cost.memory import StepSpec, cpu_peak_rss
from capsbench.cost.timing import fit_line, routing_inputs, routing_modules, time_iterations
from capsbench.errors import CapsbenchError
from capsbench.layers.routing import DynamicRouting
from capsbench.util.precision import autocast, check_precision


def test_fit_line_recovers_a_known_slope():
    rs = [1, 2, 3, 4, 5]
    noise = [0.01, -0.02, 0.015, 0.0, -0.005]
    intercept, slope = fit_line(rs, [3.0 + 0.7 * r + e for r, e in zip(rs, noise)])
    assert slope == pytest.approx(0.7, abs=0.01) and intercept == pytest.approx(3.0, abs=0.05)
    with pytest.raises(ValueError, match="two distinct"):
        fit_line([2, 2], [1.0, 1.0])


class SleepyRouting(nn.Module):
    """Synthetic routing: 10 ms fixed cost + 20 ms per iteration."""

    cost_part = "routing"

    def __init__(self) -> None:
        super().__init__()
        self.iterations = 3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.010 + 0.020 * self.iterations)
        return x


def test_time_iterations_recovers_per_iteration_cost():
    module = SleepyRouting()
    timing = time_iterations(module, (torch.zeros(1),), max_iterations=4, device="cpu", warmup=0, repeats=3)
    assert list(timing.seconds) == [1, 2, 3, 4]
    assert timing.slope == pytest.approx(0.020, rel=0.25)  # sleep overshoots a little on a loaded machine
    assert timing.intercept == pytest.approx(0.010, abs=0.008)
    assert timing.events is None and module.iterations == 3  # restored


def test_routing_modules_and_their_inputs_are_found():
    model = create_model("capsnet", conv_channels=8, primary_types=2, primary_dim=4, class_dim=4, decoder_hidden=())
    found = routing_modules(model)
    assert [name for name, _ in found] == ["routing"]
    (u_hat,) = routing_inputs(model, found[0][1], torch.rand(2, 1, 28, 28))
    assert u_hat.shape == (2, 2 * 6 * 6, 10, 4)
    assert routing_modules(create_model("cnn_9x9", channels=(2, 2, 2), fc=(4,))) == []


def test_fp16_is_refused_and_bf16_keeps_routing_softmax_and_squash_in_fp32():
    with pytest.raises(CapsbenchError, match="bf16"):
        check_precision("fp16")
    with pytest.raises(CapsbenchError, match="fp32, bf16"):
        check_precision("int8")
    u_hat = torch.randn(2, 30, 5, 8)
    ref = DynamicRouting(iterations=3)(u_hat)
    with autocast("cpu", "bf16"):
        v = DynamicRouting(iterations=3)(u_hat.bfloat16())
    assert v.dtype == torch.float32  # squash ran in fp32
    assert torch.allclose(v, ref, atol=2e-2)


def test_bf16_training_step_backward_runs():
    setup = rb.make_setup(2, in_caps=20)
    rb.ours_step(setup, "bf16")()
    assert setup.u.grad is not None and torch.isfinite(setup.u.grad).all()


def test_benchmark_formulations_give_equal_outputs_and_gradients():
    setup = rb.make_setup(4, in_caps=72)
    diffs = rb.max_differences(setup)
    assert diffs["output"] < 1e-5 and diffs["grad_u"] < 1e-5 and diffs["grad_W"] < 1e-5


@pytest.mark.slow  # two fresh Python processes importing torch
def test_peak_rss_probe_sees_a_training_step_larger_than_inference():
    args = {"conv_channels": 8, "primary_types": 2, "primary_dim": 4, "class_dim": 4, "decoder_hidden": [16]}
    infer = cpu_peak_rss(StepSpec("capsnet", args, (1, 28, 28), 256, "infer"))
    train = cpu_peak_rss(StepSpec("capsnet", args, (1, 28, 28), 256, "train"))
    # conv1 activations alone: 256 images x 8 x 20 x 20 x 4 bytes = 3.3 MB; training keeps them and their gradients.
    assert infer.step > 2**20 and train.step > infer.step
    assert train.peak > train.step


def test_time_pair_alternates_and_keeps_the_order():
    fast, slow = (lambda: time.sleep(0.002)), (lambda: time.sleep(0.02))
    a, b = rb.time_pair(fast, slow, "cpu", warmup=1, repeats=3)
    assert a < b and b == pytest.approx(0.02, rel=0.5)
