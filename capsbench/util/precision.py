"""Numeric precision and compilation options: fp32 or bf16 autocast (votes, convolutions and matmuls in bf16; routing
keeps softmax and squash in fp32, the losses stay fp32), optional torch.compile. fp16 is refused. bf16 runs on CUDA and
on CPUs with bf16 instructions (AVX512-BF16, AMX-BF16), detected from what the kernel reports. The checks run while
the config is validated, so torch is imported only inside the functions that use it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from capsbench.errors import CapsbenchError

if TYPE_CHECKING:
    from omegaconf import DictConfig
    from torch import nn

PRECISIONS = ("fp32", "bf16")
CPUINFO = Path("/proc/cpuinfo")
BF16_FLAGS = {"amx_bf16": "AMX-BF16", "avx512_bf16": "AVX512-BF16"}  # /proc/cpuinfo flag -> instruction set


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


def cpu_bf16_instructions() -> list[str]:
    """The bf16 instruction sets this CPU has, as the kernel reports them in CPUINFO ([] where none, or not Linux)."""
    try:
        lines = CPUINFO.read_text().splitlines()
    except OSError:
        return []
    flags = next((set(line.partition(":")[2].split()) for line in lines if line.startswith("flags")), set())
    return [name for flag, name in BF16_FLAGS.items() if flag in flags]


def check_device_precision(precision: str, device: str, where: str) -> None:
    """`where`=precision is fp32, or bf16 on CUDA or on a CPU with bf16 instructions; device=auto passes here
    (compose checks again once it is resolved)."""
    try:
        check_precision(precision)
    except CapsbenchError as exc:
        raise CapsbenchError(f"{where}: {exc}") from None
    on_cpu = not (device == "auto" or str(device).startswith("cuda"))
    if precision == "bf16" and on_cpu and not cpu_bf16_instructions():
        raise CapsbenchError(f"{where}=bf16 needs a GPU or a CPU with bf16 instructions (AVX512-BF16 or AMX-BF16), "
                             f"and this CPU reports none (device={device}); use {where}=fp32, or device=cuda")


def check_train_precision(train: DictConfig, device: str, where: str = "train") -> None:
    """train.precision: see check_device_precision."""
    check_device_precision(train.precision, device, f"{where}.precision")


def dtype_label(precision: str) -> str:
    """How a precision is stated beside timings: 'float32' or 'bf16 autocast'."""
    return "bf16 autocast" if precision == "bf16" else "float32"


def maybe_compile(model: nn.Module, compile_model: bool) -> nn.Module:
    """torch.compile(model) when asked; the same module otherwise."""
    import torch  # here: config checks import this module before torch loads

    return torch.compile(model) if compile_model else model
