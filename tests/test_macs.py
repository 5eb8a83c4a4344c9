"""MAC counting: hand-computed layers (batch dimension included), Sabour's published count, and fvcore
against FlopCounterMode on every registered model."""

import pytest
import torch
from composing import compose
from torch import nn

from capsbench import create_model, list_models
from capsbench.cost.macs import count_macs, flop_counter_total, fvcore_analysis, parameter_counts
from capsbench.layers.capsules import CapsuleVotes
from capsbench.layers.routing import DynamicRouting


def counted(module: nn.Module, *inputs: torch.Tensor) -> dict[str, int]:
    return dict(fvcore_analysis(module, inputs[0] if len(inputs) == 1 else inputs).by_operator())


def test_conv_and_linear_macs_include_the_batch():
    # Conv 2->4 @3x3 on (3, 2, 8, 8): 3 images x 4 x 6 x 6 outputs x (2 x 3 x 3) MACs each = 7,776.
    assert counted(nn.Conv2d(2, 4, 3), torch.rand(3, 2, 8, 8))["conv"] == 3 * 4 * 6 * 6 * 2 * 9
    # padding="same" traces to aten::_convolution_mode, which fvcore alone does not count: 3 x 4 x 8 x 8 x 18.
    assert counted(nn.Conv2d(2, 4, 3, padding="same"), torch.rand(3, 2, 8, 8))["_convolution_mode"] == 3 * 4 * 64 * 18
    # Linear 5->7 on 3 rows: 3 x 5 x 7 = 105 (bias adds are not MACs).
    assert counted(nn.Linear(5, 7), torch.rand(3, 5))["linear"] == 105


def test_votes_and_dynamic_routing_macs():
    b, i, k, j, d, r = 3, 12, 4, 5, 6, 3
    votes = CapsuleVotes(in_caps=i, in_dim=k, out_caps=j, out_dim=d)
    assert counted(votes, torch.rand(b, i, k))["bmm"] == b * i * k * j * d
    ops = counted(DynamicRouting(iterations=r), torch.rand(b, i, j, d))
    # r weighted sums s_j and r - 1 agreement updates, each B x I x J x D MACs.
    assert ops["bmm"] == (2 * r - 1) * b * i * j * d
    assert ops["softmax"] == r * b * j * i  # routing ops are counted too (one per element), not dropped
    assert ops["sqrt"] > 0 and ops["div"] > 0


class BroadcastVotes(nn.Module):
    """The public-implementation votes: W (1, I, J, D, K) @ u (B, I, 1, K, 1); fvcore's own handle drops B."""

    def __init__(self, i: int, j: int, d: int, k: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(1, i, j, d, k))

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return torch.matmul(self.weight, u[:, :, None, :, None])


def test_broadcast_matmul_counts_the_batch_dimension():
    b, i, j, d, k = 4, 6, 3, 5, 2
    assert counted(BroadcastVotes(i, j, d, k), torch.rand(b, i, k))["matmul"] == b * i * j * d * k


def test_sabour_capsnet_published_macs_and_parameter_split():
    report = count_macs(create_model("capsnet"), (1, 28, 28))
    # conv 20x20x256x81 + primary 6x6x256x(256x81) + votes 1152x8x160 + routing 5 x 1152x160 = 201,793,536
    assert report.macs["encoder"] + report.macs["routing"] == 201_793_536  # Sabour: 201.8 M
    assert report.macs["decoder"] == 160 * 512 + 512 * 1024 + 1024 * 784 == 1_409_024  # 1.41 M
    assert report.by_module["votes"] == 1152 * 8 * 160
    counts = parameter_counts(create_model("capsnet"))
    assert counts["routing"] == 1152 * 8 * 160 and counts["total"] == 8_215_568
    assert counts["decoder"] == 160 * 512 + 512 + 512 * 1024 + 1024 + 1024 * 784 + 784


def smoke_args(name: str) -> dict:
    cfg = compose(["suite=efficiency", "budget=smoke", "device=cpu"])
    return dict(cfg.model_args.get(name) or {})


@pytest.mark.parametrize("name", list_models())
def test_fvcore_agrees_with_flop_counter_mode(name):
    """Stated tolerance: relative 1e-5. Both count conv/linear/matmul MACs (FlopCounterMode 2 per MAC); they agree
    exactly on every model but capsnet_em, where fvcore counts 6 MACs more in 1.06 M (not yet traced to an op)."""
    model = create_model(name, **smoke_args(name))
    report = count_macs(model, (1, 28, 28))
    assert report.total_macs > 0
    assert report.flop_counter_macs == pytest.approx(report.total_macs, rel=1e-5)
    assert flop_counter_total(model, torch.rand(1, 1, 28, 28)) == 2 * report.flop_counter_macs
    assert sum(report.by_module.values()) <= report.total_macs


def test_uncounted_ops_are_listed():
    report = count_macs(create_model("capsnet", **smoke_args("capsnet")), (1, 28, 28))
    assert "aten::one_hot" in report.uncounted  # the decoder's mask: no arithmetic handle, so it is listed
