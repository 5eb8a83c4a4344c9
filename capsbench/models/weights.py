"""Weights trained elsewhere: a PyTorch state dict (.pt / .pth, read with torch.load(weights_only=True), so the file
cannot run code) or a .safetensors file, loaded strictly into the model: missing, unexpected or wrongly shaped keys are
one error that lists them."""

from __future__ import annotations

import hashlib
import pickle
import re
import warnings
from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from torch import nn

from capsbench.errors import CapsbenchError
from capsbench.models.adapter import ExternalModel

# What torch.load(weights_only=True) raises on files it refuses or cannot read (as capsbench.train.checkpoints).
UNREADABLE = (RuntimeError, pickle.UnpicklingError, EOFError, ValueError, IndexError, KeyError, OSError)
SHOWN = 5  # keys listed per kind in an error
MAX_REASON = 200  # characters of a reader's own words quoted in an error
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # torch's messages embolden words with terminal escapes
# why torch.load(weights_only=True) refused the file: its unpickler's words, or the global it would not load
REFUSED = re.compile(r"WeightsUnpickler error:\s*(.+)|(Trying to load unsupported GLOBAL [^\n]+)")


def read_state_dict(path: Path, where: str) -> dict[str, torch.Tensor]:
    """The tensors of a weights file, on the CPU; a {"state_dict": {...}} wrapper (as Lightning saves) is unwrapped."""
    if path.stat().st_size == 0:
        raise CapsbenchError(f"{where}: {path} is empty (0 bytes): an interrupted copy or save? Save the state dict "
                             "again: torch.save(model.state_dict(), 'w.pt')")
    try:
        if path.suffix == ".safetensors":
            state = load_file(str(path), device="cpu")
        else:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Detected pickle protocol")
                state = torch.load(path, map_location="cpu", weights_only=True)
    except (*UNREADABLE, SafetensorError) as exc:
        text = ANSI.sub("", str(exc)).strip()
        refused = REFUSED.search(text)
        reason = _sentence(refused.group(refused.lastindex) if refused
                           else (text.splitlines() or [type(exc).__name__])[0])
        if text.startswith("Weights only load failed"):  # pickled objects: weights_only=True refuses to run their code
            reason = (f"it holds Python objects, not only tensors, and capsbench loads weights with weights_only=True "
                      f"so that a file cannot run code: {reason}")
        raise CapsbenchError(
            f"{where}: cannot read {path} as weights ({reason}); save a state dict: torch.save(model.state_dict(), "
            "'w.pt') or safetensors.torch.save_file(model.state_dict(), 'w.safetensors')"
        ) from None
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(k, str) and torch.is_tensor(v) for k, v in state.items()):
        raise CapsbenchError(
            f"{where}: {path} holds a {type(state).__name__}, not a state dict of tensors; save "
            "model.state_dict() rather than the model object"
        )
    return state


def target_module(model: nn.Module) -> nn.Module:
    """The module whose state dict a weights file holds: an external model's own module, else the model."""
    return model.module if isinstance(model, ExternalModel) else model


def load_weights(model: nn.Module, path: Path, where: str, name: str) -> None:
    """Load the file into the model strictly; one error lists every missing, unexpected and wrongly shaped key."""
    target = target_module(model)
    state, expected = read_state_dict(path, where), target.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    shapes = [f"{k} (file {tuple(state[k].shape)}, model {tuple(expected[k].shape)})"
              for k in expected if k in state and state[k].shape != expected[k].shape]
    problems = [f"{what} {_listed(keys)}" for what, keys in
                (("missing keys", missing), ("unexpected keys", unexpected), ("wrong shapes", shapes)) if keys]
    if problems:
        raise CapsbenchError(
            f"{where} does not fit model {name!r}: {'; '.join(problems)}; save the state dict of the same class "
            f"built with the same arguments (model_args.{name}.*)"
        )
    kinds = [f"{k} is {_dtype(state[k])} where the model's is {_dtype(expected[k])}"
             for k in expected if _kind(state[k]) != _kind(expected[k])]
    if kinds:
        raise CapsbenchError(
            f"{where} does not fit model {name!r}: tensor {_listed(kinds)} (loading would cast it silently); save the "
            "weights in the dtypes the model trained with: torch.save(model.state_dict(), 'w.pt')"
        )
    target.load_state_dict(state, strict=True)


def _dtype(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def _kind(tensor: torch.Tensor) -> str:
    """floating, complex, bool or integer: a tensor loads into a parameter or buffer of its own kind only."""
    if tensor.dtype.is_floating_point:
        return "floating"
    return "complex" if tensor.dtype.is_complex else "bool" if tensor.dtype == torch.bool else "integer"


def state_sha256(module: nn.Module) -> str:
    """A SHA-256 of a module's state dict by content (tensors_sha256)."""
    return tensors_sha256(module.state_dict())


def tensors_sha256(state: Mapping[str, torch.Tensor]) -> str:
    """A SHA-256 of a state dict by content: each tensor's name, dtype, shape and bytes, in name order. A module and the
    file its state dict was saved to (any format) have the same one."""
    digest = hashlib.sha256()
    items = sorted(state.items())
    raw = [t.detach().contiguous().reshape(-1) for _, t in items]
    blob = torch.cat([t.view(torch.uint8) for t in raw if t.numel()] or [torch.zeros(0, dtype=torch.uint8)])
    data = memoryview(blob.cpu().numpy()).cast("B")  # one copy to the host for the whole state (a GPU syncs once)
    at = 0
    for (key, tensor), flat in zip(items, raw):
        size = flat.numel() * flat.element_size()
        digest.update(f"{key}|{flat.dtype}|{tuple(tensor.shape)}\n".encode())
        digest.update(data[at:at + size])
        at += size
    return digest.hexdigest()


def _sentence(text: str) -> str:
    """The first sentence of a library's message, whole (or cut at a word, marked)."""
    first = text.split(". ")[0].strip().rstrip(".")
    return first if len(first) <= MAX_REASON else first[:MAX_REASON].rsplit(" ", 1)[0] + " ..."


def _listed(keys: list[str]) -> str:
    return ", ".join(keys[:SHOWN]) + (f" (+{len(keys) - SHOWN} more)" if len(keys) > SHOWN else "")
