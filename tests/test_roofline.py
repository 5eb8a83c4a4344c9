"""Roofline pieces: FLOP counts against the textbook count, the fraction of a peak, the dominant layers and their
inputs as the step sees them."""

import torch
from torch import nn

from capsbench.cost.roofline import (
    Throughput,
    copy_bytes_per_second,
    counted_flops,
    dominant_layers,
    layer_throughput,
    peak_flops,
)


def test_counted_flops_of_a_linear_layer_forward_and_backward():
    layer, x = nn.Linear(64, 32), torch.randn(8, 64)
    assert counted_flops(lambda: layer(x)) == 2 * 8 * 64 * 32
    # backward: the weight gradient only (x needs none), one more matmul of the same size
    assert counted_flops(lambda: layer(x).sum().backward()) == 2 * (2 * 8 * 64 * 32)


def test_the_fraction_of_the_peak_is_the_achieved_rate_over_it():
    t = Throughput("step", flops=4e9, seconds=0.5, peak=16e9)
    assert t.gflops == 8.0 and t.fraction == 0.5 and "50 % of the measured peak 16 GFLOP/s" in t.line()


def test_the_probes_measure_positive_rates():
    assert peak_flops("cpu", "fp32", repeats=1) > 1e8
    assert copy_bytes_per_second("cpu", mib=8, repeats=1) > 1e7


def test_dominant_layers_are_the_largest_with_the_inputs_they_saw():
    model = nn.Sequential(nn.Linear(16, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 4))
    x = torch.randn(4, 16)
    top = dominant_layers(model, lambda: model(x), k=2)
    assert [name for name, _, _ in top] == ["2", "0"]  # 256x256 beats 16x256 beats 256x4
    (inputs,) = top[1][2]
    assert torch.equal(inputs, x) and not inputs.requires_grad  # the first layer's input needs no gradient
    assert top[0][2][0].requires_grad  # an activation: the step differentiates it
    measured = layer_throughput("layer", top[0][1], top[0][2], device="cpu", precision="fp32", peak=1e12, repeats=1)
    assert measured.flops == 3 * 2 * 4 * 256 * 256  # forward, input gradient, weight gradient
