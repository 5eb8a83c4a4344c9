"""Dynamic routing against a plain reference and its invariants."""

import pytest
import torch

from capsbench.layers.capsules import squash
from capsbench.layers.routing import DynamicRouting


def reference_routing(u_hat: torch.Tensor, iterations: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Procedure 1 of Sabour et al. written with elementwise products, as the paper states it."""
    b = torch.zeros(u_hat.shape[:3], dtype=u_hat.dtype)
    for r in range(iterations):
        c = torch.softmax(b, dim=2)
        s = (c.unsqueeze(-1) * u_hat).sum(dim=1)
        v = squash(s)
        if r < iterations - 1:
            b = b + (u_hat * v.unsqueeze(1)).sum(dim=-1)
    return v, c


@pytest.mark.parametrize("iterations", [1, 2, 3, 5])
def test_routing_equals_reference(iterations):
    u_hat = torch.randn(4, 36, 10, 16, dtype=torch.float64)
    v, c = DynamicRouting(iterations=iterations)(u_hat, return_coupling=True)
    v_ref, c_ref = reference_routing(u_hat, iterations)
    assert torch.allclose(v, v_ref, atol=1e-10)
    assert torch.allclose(c, c_ref, atol=1e-10)


def test_coupling_coefficients_sum_to_one_over_output_capsules():
    u_hat = torch.randn(3, 20, 7, 8)
    _, c = DynamicRouting(iterations=3)(u_hat, return_coupling=True)
    assert c.shape == (3, 20, 7)
    assert torch.allclose(c.sum(dim=2), torch.ones(3, 20), atol=1e-6)


def test_one_iteration_is_uniform_coupling():
    u_hat = torch.randn(2, 12, 5, 4)
    v = DynamicRouting(iterations=1)(u_hat)
    assert torch.allclose(v, squash(u_hat.sum(dim=1) / 5), atol=1e-6)  # c = 1 / out_caps everywhere


def test_routing_iterations_must_be_positive():
    with pytest.raises(ValueError, match=">= 1"):
        DynamicRouting(iterations=0)


@pytest.mark.parametrize("iterations", [1, 2, 3])
def test_hand_written_backward_equals_autograd_of_reference(iterations):
    torch.manual_seed(0)
    u_hat = torch.randn(3, 20, 6, 5, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(3, 6, 5, dtype=torch.float64)  # a generic loss: sum(weights * v)
    (grad,) = torch.autograd.grad((DynamicRouting(iterations=iterations)(u_hat) * weights).sum(), u_hat)
    (grad_ref,) = torch.autograd.grad((reference_routing(u_hat, iterations)[0] * weights).sum(), u_hat)
    assert torch.allclose(grad, grad_ref, atol=1e-10)


def test_routing_gradcheck():
    u_hat = torch.randn(2, 7, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: DynamicRouting(iterations=3)(x), (u_hat,))


def test_iteration_hook_is_called_once_per_iteration():
    routing = DynamicRouting(iterations=4)
    seen = []
    routing.on_iteration = seen.append
    routing(torch.randn(2, 5, 3, 4))
    assert seen == [0, 1, 2, 3]


def test_gradients_through_capsule_votes_equal_autograd_of_reference():
    """CapsuleVotes hands routing strided votes and gets their gradient back in its own (in, B, out, D) layout."""
    from capsbench.layers.capsules import CapsuleVotes

    torch.manual_seed(0)
    votes = CapsuleVotes(in_caps=12, in_dim=4, out_caps=5, out_dim=6).double()
    u = torch.randn(3, 12, 4, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(3, 5, 6, dtype=torch.float64)
    grads = torch.autograd.grad((DynamicRouting(iterations=3)(votes(u)) * weights).sum(), (u, votes.weight))
    grads_ref = torch.autograd.grad((reference_routing(votes(u), 3)[0] * weights).sum(), (u, votes.weight))
    for g, g_ref in zip(grads, grads_ref):
        assert torch.allclose(g, g_ref, atol=1e-10)


@pytest.mark.parametrize("iterations", [1, 3])
def test_gradcheck_of_v_and_the_last_pre_squash_s(iterations):
    """Finite differences against the hand-written backward, for a loss on v and one on the last s together."""
    torch.manual_seed(0)
    u_hat = torch.randn(2, 7, 3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda x: DynamicRouting(iterations=iterations)(x, return_pre_squash=True), (u_hat,)
    )


def test_straight_through_gradient_with_one_iteration_is_the_uniform_coupling():
    """Known answer: r = 1 gives c = 1/out, s_j = sum_i u_hat_ij / out; with the squash's backward the identity,
    dL/du_hat_ij = (dL/dv_j + dL/ds_j) / out for every input capsule i."""
    from capsbench.layers.straight_through import straight_through

    torch.manual_seed(0)
    u_hat = torch.randn(2, 6, 4, 3, dtype=torch.float64, requires_grad=True)
    w_v, w_s = torch.randn(2, 4, 3, dtype=torch.float64), torch.randn(2, 4, 3, dtype=torch.float64)
    with straight_through():
        v, s = DynamicRouting(iterations=1)(u_hat, return_pre_squash=True)
        (grad,) = torch.autograd.grad((v * w_v).sum() + (s * w_s).sum(), u_hat)
    expected = ((w_v + w_s) / 4).unsqueeze(1).expand(2, 6, 4, 3)
    assert torch.allclose(grad, expected, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("st", [False, True])
def test_strided_votes_with_pre_squash_loss_equal_the_reference_with_and_without_straight_through(st):
    """CapsuleVotes' strided layout, losses on v and the last s, the squash's backward real or the identity."""
    from contextlib import nullcontext

    from capsbench.layers.capsules import CapsuleVotes
    from capsbench.layers.straight_through import saturating, straight_through

    def reference(u_hat):  # Procedure 1, every squash through `saturating`: v and the last s
        b = torch.zeros(u_hat.shape[:3], dtype=u_hat.dtype)
        for r in range(3):
            s = (torch.softmax(b, dim=2).unsqueeze(-1) * u_hat).sum(dim=1)
            v = saturating(squash, s)
            if r < 2:
                b = b + (u_hat * v.unsqueeze(1)).sum(dim=-1)
        return v, s

    torch.manual_seed(0)
    votes = CapsuleVotes(in_caps=12, in_dim=4, out_caps=5, out_dim=6, init_std=0.3).double()
    u = torch.randn(3, 12, 4, dtype=torch.float64, requires_grad=True)
    w_v, w_s = torch.randn(3, 5, 6, dtype=torch.float64), torch.randn(3, 5, 6, dtype=torch.float64)
    with straight_through() if st else nullcontext():
        v, s = DynamicRouting(iterations=3)(votes(u), return_pre_squash=True)
        grads = torch.autograd.grad((v * w_v).sum() + (s * w_s).sum(), (u, votes.weight))
        v_ref, s_ref = reference(votes(u))
        grads_ref = torch.autograd.grad((v_ref * w_v).sum() + (s_ref * w_s).sum(), (u, votes.weight))
    assert torch.allclose(v, v_ref, atol=1e-12) and torch.allclose(s, s_ref, atol=1e-12)
    for g, g_ref in zip(grads, grads_ref):
        assert torch.allclose(g, g_ref, rtol=1e-9, atol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("st", [False, True])
def test_compiled_routing_backward_equals_eager(st):
    """train.compile traces the custom backward (squash's closed form, no nested autograd.grad) without falling back."""
    from contextlib import nullcontext

    from capsbench.layers.straight_through import straight_through

    torch.manual_seed(0)
    u_hat = torch.randn(4, 20, 5, 6, requires_grad=True)
    w = torch.randn(4, 5, 6)
    routing = DynamicRouting(iterations=3)

    def loss(u):
        v, s = routing(u, return_pre_squash=True)
        return (v * w).sum() + (s * w).sum()

    torch._dynamo.reset()
    with straight_through() if st else nullcontext():
        (compiled,) = torch.autograd.grad(torch.compile(loss, fullgraph=True)(u_hat), u_hat)
        (eager,) = torch.autograd.grad(loss(u_hat), u_hat)
    torch._dynamo.reset()
    assert torch.allclose(compiled, eager, rtol=1e-4, atol=1e-4)
