"""Counts the operations that would make the host wait for a CUDA device, on any device (a CPU too), so that how far
code is from running without host synchronisation is measured where no GPU is.

Two kinds are counted, by name: reads of a tensor's values on the host (`.item()`, `bool()`, `int()`, `float()`,
`.tolist()`, `.numpy()`, `.cpu()`, `.to("cpu")` from another device; `.to(device)` is a move to the run's device,
never counted) and operations whose output shape depends on the values (boolean-mask
indexing and index_put, `nonzero`, `masked_select`, `unique`), which must read a count back before they can allocate.
On a CPU every tensor counts as if it lived on the device: the count is an upper bound for the same code on a GPU,
where host-side bookkeeping tensors would not sync. On CUDA, `torch.cuda.set_sync_debug_mode` says the same.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

_HOST_READS = {
    torch.Tensor.item: "item",
    torch.Tensor.tolist: "tolist",
    torch.Tensor.numpy: "numpy",
    torch.Tensor.__bool__: "bool",
    torch.Tensor.__int__: "int",
    torch.Tensor.__float__: "float",
    torch.Tensor.__index__: "index",
    torch.Tensor.cpu: "to_cpu",
}
_SHAPE_FROM_VALUES = {
    torch.ops.aten.nonzero.default: "nonzero",
    torch.ops.aten.masked_select.default: "masked_select",
    torch.ops.aten._unique2.default: "unique",
    torch.ops.aten.unique_dim.default: "unique",
    torch.ops.aten.unique_consecutive.default: "unique",
}
_INDEXING = {torch.ops.aten.index.Tensor: "bool_index", torch.ops.aten.index_put_.default: "bool_index_put",
             torch.ops.aten.index_put.default: "bool_index_put", torch.ops.aten._index_put_impl_.default: None}


def _boolean(indices: Any) -> bool:
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices or ())


class _HostReads(TorchFunctionMode):
    def __init__(self, counts: Counter) -> None:
        super().__init__()
        self.counts, self.depth = counts, 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kind = _HOST_READS.get(func)
        if kind is None and func is torch.Tensor.to and args and args[0].device.type != "cpu" \
                and _to_host(args[1:], kwargs):
            kind = "to_cpu"
        if kind is None or self.depth:
            return func(*args, **kwargs)
        self.counts[kind] += 1
        self.depth += 1  # what the read calls underneath (aten._local_scalar_dense) is the same read
        try:
            return func(*args, **kwargs)
        finally:
            self.depth -= 1


def _to_host(args: tuple, kwargs: dict) -> bool:
    target = kwargs.get("device", args[0] if args else None)
    return isinstance(target, (str, torch.device)) and torch.device(target).type == "cpu"


class _ShapeOps(TorchDispatchMode):
    def __init__(self, counts: Counter, reads: _HostReads) -> None:
        super().__init__()
        self.counts, self.reads = counts, reads

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        kind = _SHAPE_FROM_VALUES.get(func)
        if func in _INDEXING and _boolean(args[1] if len(args) > 1 else kwargs.get("indices")):
            kind = _INDEXING[func]
        elif func is torch.ops.aten._local_scalar_dense.default and not self.reads.depth:
            kind = "item"  # a scalar read from inside an operator (e.g. a Python scalar made of a tensor)
        if kind is not None:
            self.counts[kind] += 1
        return func(*args, **kwargs)


class SyncCounter:
    """Context manager: `with SyncCounter() as syncs: ...`, then `syncs.total` and `syncs.counts` (by kind)."""

    def __init__(self) -> None:
        self.counts: Counter = Counter()
        self._reads = _HostReads(self.counts)
        self._ops = _ShapeOps(self.counts, self._reads)

    def __enter__(self) -> SyncCounter:
        self._reads.__enter__()
        self._ops.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._ops.__exit__(*exc)
        self._reads.__exit__(*exc)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


class ForwardCounter:
    """Counts the forward calls of every module of class `cls` while open (copies that a run makes of a model count
    too): `with ForwardCounter(type(model)) as calls: ...; calls.count`."""

    def __init__(self, cls: type[torch.nn.Module]) -> None:
        self.cls, self.count, self._handle = cls, 0, None

    def _seen(self, module: torch.nn.Module, _: object) -> None:
        if type(module) is self.cls:
            self.count += 1

    def __enter__(self) -> ForwardCounter:
        self._handle = torch.nn.modules.module.register_module_forward_pre_hook(self._seen)
        return self

    def __exit__(self, *exc: object) -> None:
        self._handle.remove()
