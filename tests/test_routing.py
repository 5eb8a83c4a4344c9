"""Dynamic routing against a plain reference and its invariants."""

import pytest
import torch

from capsbench.models.capsules import squash
from capsbench.models.routing import DynamicRouting


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
    from capsbench.models.capsules import CapsuleVotes

    torch.manual_seed(0)
    votes = CapsuleVotes(in_caps=12, in_dim=4, out_caps=5, out_dim=6).double()
    u = torch.randn(3, 12, 4, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(3, 5, 6, dtype=torch.float64)
    grads = torch.autograd.grad((DynamicRouting(iterations=3)(votes(u)) * weights).sum(), (u, votes.weight))
    grads_ref = torch.autograd.grad((reference_routing(votes(u), 3)[0] * weights).sum(), (u, votes.weight))
    for g, g_ref in zip(grads, grads_ref):
        assert torch.allclose(g, g_ref, atol=1e-10)
