"""MACs per image with fvcore, corrected for broadcast matmuls and extended to routing ops; cross-checked
against torch.utils.flop_counter.FlopCounterMode. Units: MACs (FLOPs = 2 x MACs)."""

from __future__ import annotations

import math
import warnings
from collections import Counter
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

with warnings.catch_warnings():  # fvcore's focal loss calls torch.jit.script at import; nothing of ours uses it
    warnings.filterwarnings("ignore", message=r"`torch\.jit\.script` is deprecated", category=FutureWarning)
    from fvcore.nn import FlopCountAnalysis
    from fvcore.nn.jit_handles import get_shape

PARTS = ("encoder", "routing", "decoder")
# Ops whose count is multiply-accumulates (fvcore's short names); FlopCounterMode counts exactly these,
# as 2 FLOPs per MAC.
MAC_OPS = frozenset({"conv", "_convolution_mode", "addmm", "bmm", "matmul", "mm", "linear", "einsum"})
ELEMENTWISE = ("mul", "mul_", "div", "div_", "add", "add_", "sub", "rsub", "sqrt", "rsqrt", "exp", "log", "pow",
               "square", "neg", "sigmoid", "relu", "relu_", "tanh")
REDUCTIONS = ("sum", "mean", "softmax", "_softmax", "log_softmax", "linalg_vector_norm", "norm")


def matmul_macs(inputs: list[Any], outputs: list[Any]) -> int:
    """aten::matmul with broadcasting: every output element costs `inner` MACs.

    fvcore's own handle multiplies the first operand's size by the last output dim, which drops a
    batch dimension that only the second operand carries (W (1, I, J, D, K) @ u (B, I, 1, K, 1)).
    """
    a = get_shape(inputs[0])
    return math.prod(get_shape(outputs[0])) * a[-1]


def conv_mode_macs(inputs: list[Any], outputs: list[Any]) -> int:
    """aten::_convolution_mode (padding="same"/"valid", which fvcore does not know): each output
    element costs in_channels / groups x kernel area MACs; weight shape (out, in / groups, kh, kw)."""
    return math.prod(get_shape(outputs[0])) * math.prod(get_shape(inputs[1])[1:])


def _per_output(inputs: list[Any], outputs: list[Any]) -> int:
    return math.prod(get_shape(outputs[0]))


def _per_input(inputs: list[Any], outputs: list[Any]) -> int:
    return math.prod(get_shape(inputs[0]))


@dataclass
class MacReport:
    """Counts for one forward pass of one image.

    macs: multiply-accumulates of conv / linear / matmul ops, by part (encoder, routing, decoder).
    elementwise: other arithmetic (softmax, squash, norms, activations): one op per output element of
        elementwise ops and per input element of reductions and softmax; by part.
    by_module: MACs of each top-level module.
    uncounted: ops that no handle counts -> number of calls; listed, never silently zero.
    flop_counter_macs: FlopCounterMode's total FLOPs / 2 (it counts only MAC ops).
    """

    macs: dict[str, int]
    elementwise: dict[str, int]
    by_module: dict[str, int]
    uncounted: dict[str, int]
    flop_counter_macs: int

    @property
    def total_macs(self) -> int:
        return sum(self.macs.values())


class _Outputs(nn.Module):
    """Traceable wrapper: the model's output tensors as a tuple (jit tracing cannot return dataclasses)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.model(x)
        return tuple(t for t in (out.scores, out.logits, out.poses, out.reconstructions) if t is not None)


def part_of(model: nn.Module, module_name: str) -> str:
    """The part a (dotted) module name belongs to: its top-level child's `cost_part`, else encoder."""
    top = module_name.split(".")[0]
    child = getattr(model, top, None) if top else None
    return getattr(child, "cost_part", "encoder") if child is not None else "encoder"


def parameter_counts(model: nn.Module) -> dict[str, int]:
    """Parameters per part (encoder, routing, decoder) and in total."""
    counts = {p: 0 for p in PARTS}
    for name, param in model.named_parameters():
        counts[part_of(model, name.rsplit(".", 1)[0] if "." in name else "")] += param.numel()
    return {**counts, "total": sum(counts.values())}


def fvcore_analysis(model: nn.Module, x: torch.Tensor) -> FlopCountAnalysis:
    """fvcore with the broadcast-correct matmul handle and handles for elementwise and routing ops."""
    analysis = FlopCountAnalysis(model, (x,))
    analysis.set_op_handle("aten::matmul", matmul_macs)
    analysis.set_op_handle("aten::_convolution_mode", conv_mode_macs)
    analysis.set_op_handle(**{f"aten::{op}": _per_output for op in ELEMENTWISE})
    analysis.set_op_handle(**{f"aten::{op}": _per_input for op in REDUCTIONS})
    analysis.unsupported_ops_warnings(False).uncalled_modules_warnings(False).tracer_warnings("none")
    return analysis


def flop_counter_total(model: nn.Module, x: torch.Tensor) -> int:
    """Total FLOPs of one forward pass by torch.utils.flop_counter.FlopCounterMode."""
    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        model(x)
    return counter.get_total_flops()


def count_macs(model: nn.Module, image_shape: tuple[int, int, int]) -> MacReport:
    """Counts for one image of shape (C, H, W), model in eval mode, in fp32."""
    was_training = model.training
    model.eval()
    x = torch.rand(1, *image_shape, device=next(model.parameters()).device)
    wrapped = _Outputs(model)
    analysis = fvcore_analysis(wrapped, x)
    per_module = analysis.by_module_and_operator()
    macs: Counter[str] = Counter({p: 0 for p in PARTS})
    elementwise: Counter[str] = Counter({p: 0 for p in PARTS})
    by_module: dict[str, int] = {}
    assigned: Counter[str] = Counter()
    for name, ops in per_module.items():
        if not name.startswith("model.") or name.count(".") > 1:
            continue  # top-level modules of the model only
        child = name.removeprefix("model.")
        by_module[child] = sum(n for op, n in ops.items() if op in MAC_OPS)
        part = part_of(model, child)
        for op, count in ops.items():
            (macs if op in MAC_OPS else elementwise)[part] += count
            assigned[op] += count
    for op, count in per_module["model"].items():  # ops in the model's own forward (lengths, logits)
        (macs if op in MAC_OPS else elementwise)["encoder"] += count - assigned[op]
    uncounted = dict(analysis.unsupported_ops())
    total = flop_counter_total(model, x) // 2
    model.train(was_training)
    return MacReport(dict(macs), dict(elementwise), dict(by_module), uncounted, total)

