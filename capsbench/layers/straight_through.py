"""A switch that gives capsule models' saturating non-linearities an identity backward (BPDA), for adaptive attacks.

Backward Pass Differentiable Approximation, Athalye, Carlini, Wagner, "Obfuscated Gradients Give a False Sense of
Security" (arXiv:1802.00420): the forward pass stays exact, the backward treats the non-linearity as the identity.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch

_ACTIVE: ContextVar[bool] = ContextVar("straight_through", default=False)


@contextmanager
def straight_through(active: bool = True) -> Iterator[None]:
    """Inside this block every non-linearity called through `saturating` back-propagates as the identity (with
    active=False: exactly, as outside)."""
    token = _ACTIVE.set(active)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def is_active() -> bool:
    """Whether the straight-through switch is on in this thread."""
    return _ACTIVE.get()


class _IdentityBackward(torch.autograd.Function):
    """y = fn(x) exactly in the forward; dL/dx = dL/dy in the backward (fn must keep x's shape)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        return fn(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad, None


def saturating(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """fn(x), with an identity backward while `straight_through()` is active (squash, exp-squash, sigmoid gates)."""
    if _ACTIVE.get() and x.requires_grad:
        return _IdentityBackward.apply(x, fn)
    return fn(x)
