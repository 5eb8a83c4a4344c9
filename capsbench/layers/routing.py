"""Routing-by-agreement from Sabour, Frosst, Hinton, "Dynamic Routing Between Capsules" (arXiv:1710.09829)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from capsbench.layers.capsules import squash, squash_backward
from capsbench.layers.straight_through import is_active as straight_through_active


def _fp32(t: torch.Tensor) -> torch.Tensor:
    """Softmax and squash run in at least fp32 even when the votes are bf16."""
    return t if t.dtype in (torch.float32, torch.float64) else t.float()


def route(
    votes: torch.Tensor, batch: int, iterations: int, hook: Callable[[int], None] | None = None
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """Procedure 1 on contiguous votes (B*out, in, D): v (B, out, D), the last coupling c (B, out, in), and
    the per-iteration c's, s's and v's that the backward needs.

    Both products read each vote matrix as one contiguous (in, D) block: s = c (1, in) x votes (in, D), and the
    agreement v (1, D) x votes^T (D, in), which BLAS runs ~2x faster than votes (in, D) x v (D, 1)."""
    n, in_caps, dim = votes.shape
    out_caps = n // batch
    b_logits = votes.new_zeros(batch, out_caps, in_caps, dtype=_fp32(votes).dtype)  # (B, out, in)
    saved_c, saved_s, saved_v = [], [], []
    for it in range(iterations):
        c = torch.softmax(b_logits, dim=1)  # (B, out, in): sums to 1 over output capsules
        s = torch.bmm(c.reshape(n, 1, in_caps).to(votes.dtype), votes)  # (B*out, 1, D)
        v = squash(_fp32(s).view(batch, out_caps, dim))  # (B, out, D)
        saved_c.append(c)
        saved_s.append(s)
        saved_v.append(v)
        if it < iterations - 1:
            agreement = torch.bmm(v.view(n, 1, dim).to(votes.dtype), votes.transpose(1, 2))  # (B*out, 1, in)
            b_logits = b_logits + agreement.view(batch, out_caps, in_caps)
        if hook is not None:
            hook(it)
    return v, c, [*saved_c, *saved_s, *saved_v]


def _squash_grad(s: torch.Tensor, grad_v: torch.Tensor) -> torch.Tensor:
    """The gradient through v = squash(s) (B, out, D), by autograd of `squash` itself (whose backward is its closed
    form); while torch.compile traces, which cannot follow a nested autograd.grad, by that closed form directly."""
    if torch.compiler.is_compiling():
        return squash_backward(s, grad_v)
    with torch.enable_grad():
        s = s.detach().requires_grad_()
        (grad_s,) = torch.autograd.grad(squash(s), s, grad_v)
    return grad_s


def vote_rows(u_hat: torch.Tensor) -> torch.Tensor:
    """Votes (B, in, out, D) copied into the layout routing reads: one contiguous (in, D) matrix per (image,
    output capsule). CapsuleVotes' output is strided (rows 1 MiB apart at quick sizes), which made every
    routing matmul a TLB-missing gather; one copy is cheaper than 2r - 1 strided passes."""
    batch, in_caps, out_caps, dim = u_hat.shape
    return u_hat.permute(0, 2, 1, 3).contiguous().view(batch * out_caps, in_caps, dim)  # (B*out, in, D)


class _RoutingFunction(torch.autograd.Function):
    """Procedure 1 with a hand-written backward.

    Autograd would differentiate every bilinear op separately: 2r - 1 outer products of the size of
    the votes, accumulated one by one, and matrix-vector products in layouts BLAS handles slowly.
    This backward collects the factors of all of them and writes the votes' gradient in one batched
    matmul. Forward ops are the plain ones, so outputs are bit-identical to the autograd version.
    Shapes: u_hat (B, in, out, D); returns v (B, out, D), the last coupling c (B, out, in) and the last
    pre-squash s (B, out, D). Under `straight_through()` the squash back-propagates as the identity (BPDA).
    """

    @staticmethod
    def forward(ctx, u_hat: torch.Tensor, iterations: int, hook: Callable[[int], None] | None):
        votes = vote_rows(u_hat)  # (B*out, in, D)
        batch = u_hat.shape[0]
        v, c, saved = route(votes, batch, iterations, hook)
        ctx.save_for_backward(votes, *saved)
        ctx.batch, ctx.iterations = batch, iterations
        ctx.straight_through = straight_through_active()  # read now: the backward may run on another thread
        ctx.mark_non_differentiable(c)
        s_last = _fp32(saved[2 * iterations - 1]).view(batch, -1, votes.shape[-1])  # (B, out, D): the last s
        return v, c, s_last

    @staticmethod
    def backward(ctx, grad_v: torch.Tensor, _grad_c: torch.Tensor, grad_s_last: torch.Tensor | None):
        votes, *saved = ctx.saved_tensors
        r, batch = ctx.iterations, ctx.batch
        cs, ss, vs = saved[:r], saved[r : 2 * r], saved[2 * r :]
        n, in_caps, dim = votes.shape
        out_caps = n // batch
        left, right = [], []  # grad_votes = sum_k left_k (N, in, 1) x right_k (N, 1, D)
        grad_b = None  # gradient w.r.t. the routing logits after the current iteration
        for it in reversed(range(r)):
            g_v = grad_v if it == r - 1 else torch.zeros_like(vs[it])
            if grad_b is not None:  # b_{it+1} = b_it + votes . v_it
                g_a = grad_b.reshape(n, 1, in_caps)  # (B*out, 1, in)
                g_v = g_v + torch.bmm(g_a.to(votes.dtype), votes).view_as(g_v).to(g_v.dtype)  # (B, out, D)
                left.append(g_a)
                right.append(vs[it].reshape(n, 1, dim))
            if ctx.straight_through:  # BPDA: the squash back-propagates as the identity
                g_s = g_v.reshape(n, 1, dim).to(_fp32(ss[it]).dtype)
            else:
                g_s = _squash_grad(_fp32(ss[it]).view(batch, out_caps, dim), g_v).view(n, 1, dim)  # (B*out, 1, D)
            if it == r - 1 and grad_s_last is not None:  # a loss on the pre-squash capsules themselves
                g_s = g_s + grad_s_last.reshape(n, 1, dim).to(g_s.dtype)
            g_c = torch.bmm(g_s.reshape(n, 1, dim).to(votes.dtype), votes.transpose(1, 2))  # (B*out, 1, in)
            c = cs[it]
            g_c = g_c.view(batch, out_caps, in_caps)
            g_logits = c * (g_c - (c * g_c).sum(dim=1, keepdim=True))  # softmax backward over out
            grad_b = g_logits if grad_b is None else grad_b + g_logits
            left.append(c.reshape(n, 1, in_caps))
            right.append(g_s)
        lhs = torch.cat(left, dim=1).transpose(1, 2).to(votes.dtype)  # (B*out, in, K)
        rhs = torch.cat(right, dim=1).to(votes.dtype)  # (B*out, K, D)
        # A strided out= straight into CapsuleVotes' (in, B, out, D) layout was 4x slower on 2 threads than this
        # contiguous product and the transposing copy autograd makes of it (and torch.compile cannot trace it).
        grad = torch.bmm(lhs, rhs).view(batch, out_caps, in_caps, dim)  # (B, out, in, D)
        return grad.transpose(1, 2), None, None  # (B, in, out, D)


class DynamicRouting(nn.Module):
    """Dynamic routing (Procedure 1 of the paper).

    Coupling coefficients c = softmax(b) over output capsules; s_j = sum_i c_ij u_hat_ij;
    v_j = squash(s_j); b_ij += u_hat_ij . v_j between iterations.

    Args:
        iterations: routing iterations r (>= 1; Sabour: 3).
    Shapes: u_hat (B, in_caps, out_caps, out_dim) -> v (B, out_caps, out_dim); with return_coupling also
    c (B, in_caps, out_caps), with return_pre_squash also the last s (B, out_caps, out_dim), in that order.
    `on_iteration`, when set, is called with the iteration index after each iteration (timing hooks).
    """

    cost_part = "routing"

    def __init__(self, *, iterations: int = 3):
        super().__init__()
        if iterations < 1:
            raise ValueError(f"routing iterations must be >= 1, got {iterations}")
        self.iterations = iterations
        self.on_iteration: Callable[[int], None] | None = None

    def forward(self, u_hat: torch.Tensor, return_coupling: bool = False, return_pre_squash: bool = False):
        if u_hat.requires_grad and torch.is_grad_enabled() and not torch.jit.is_tracing():
            v, c, s = _RoutingFunction.apply(u_hat, self.iterations, self.on_iteration)
        else:  # inference and tracing (op counters): the same ops, nothing saved for a backward
            batch, _, out_caps, out_dim = u_hat.shape
            v, c, saved = route(vote_rows(u_hat), batch, self.iterations, self.on_iteration)
            s = _fp32(saved[2 * self.iterations - 1]).view(batch, out_caps, out_dim)
        extras = ((c.transpose(1, 2),) if return_coupling else ()) + ((s,) if return_pre_squash else ())
        return (v, *extras) if extras else v
