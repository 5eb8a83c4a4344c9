"""Numeric precision and compilation options of the cost suites: fp32 or bf16 autocast (votes and matmuls
in bf16; routing keeps softmax and squash in fp32), optional torch.compile. fp16 is refused.
check_precision runs while the config is validated, so torch is imported only inside the functions that use it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

from capsbench.errors import CapsbenchError

if TYPE_CHECKING:
    from omegaconf import DictConfig
    from torch import nn

PRECISIONS = ("fp32", "bf16")


def check_precision(precision: str) -> None:
    """Raise a CapsbenchError for anything but fp32 or bf16."""
    if precision == "fp16":
        raise CapsbenchError(
            "precision=fp16 is not supported: squash computes |s|^2, which overflows fp16 (max 65504) for "
            "|s| > 256 and underflows to 0 for |s| < 1e-4; use precision=bf16 (fp32's range) or fp32"
        )
    if precision not in PRECISIONS:
        raise CapsbenchError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")


@contextlib.contextmanager
def autocast(device: str, precision: str) -> Iterator[None]:
    """bf16 autocast on the model's device type for precision=bf16; nothing for fp32."""
    check_precision(precision)
    if precision == "fp32":
        yield
        return
    import torch  # here: config checks import this module before torch loads

    with torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16):
        yield


def check_train_precision(train: DictConfig, device: str, where: str = "train") -> None:
    """train.precision is fp32, or bf16 on CUDA (device=auto passes here; compose checks again once it is resolved)."""
    try:
        check_precision(train.precision)
    except CapsbenchError as exc:
        raise CapsbenchError(f"{where}.precision: {exc}") from None
    if train.precision == "bf16" and not (device == "auto" or str(device).startswith("cuda")):
        raise CapsbenchError(f"{where}.precision=bf16 trains under bf16 autocast on CUDA only, but device={device}; "
                             f"use {where}.precision=fp32 here, or device=cuda")


def dtype_label(precision: str) -> str:
    """How a precision is stated beside timings: 'float32' or 'bf16 autocast'."""
    return "bf16 autocast" if precision == "bf16" else "float32"


def maybe_compile(model: nn.Module, compile_model: bool) -> nn.Module:
    """torch.compile(model) when asked; the same module otherwise."""
    import torch  # here: config checks import this module before torch loads

    return torch.compile(model) if compile_model else model
