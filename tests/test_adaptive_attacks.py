"""Capsule-adaptive attacks: the straight-through switch, pre-squash capsules, pgd_adaptive reducing to PGD when the
squash is the identity, the vote surrogates, and attacks that do not apply being skipped with a reason."""

import pytest
import torch
from test_attacks import SETTINGS, tiny_model
from test_routing import reference_routing

from capsbench import list_models
from capsbench.attacks import ATTACKS, decisions
from capsbench.attacks.objectives import AdaptiveObjective
from capsbench.models import capsules, routing
from capsbench.models.capsules import capsule_logits, squash
from capsbench.models.routing import DynamicRouting
from capsbench.models.straight_through import saturating, straight_through

VOTE_MODELS = ("capsnet", "effcapsnet", "capsnet_em")


def test_straight_through_keeps_the_forward_and_passes_the_gradient_unchanged():
    s = torch.randn(5, 8, requires_grad=True)
    upstream = torch.randn(5, 8)
    with straight_through():
        v = saturating(squash, s)
    assert torch.equal(v, squash(s))
    (grad,) = torch.autograd.grad(v, s, upstream)
    assert torch.equal(grad, upstream)
    (true_grad,) = torch.autograd.grad(saturating(squash, s), s, upstream)  # switched off: the real derivative
    assert not torch.allclose(true_grad, upstream)


@pytest.mark.parametrize("iterations", [1, 3])
def test_routing_backward_with_pre_squash_output_and_straight_through(iterations):
    """The hand-written backward against autograd on the paper's formulation, for losses on v and on the last s."""
    u_hat = torch.randn(3, 12, 5, 4, dtype=torch.float64, requires_grad=True)
    w_v, w_s = torch.randn(3, 5, 4, dtype=torch.float64), torch.randn(3, 5, 4, dtype=torch.float64)

    def reference(u):  # Procedure 1 with every squash through `saturating`, returning v and the last s
        b = torch.zeros(u.shape[:3], dtype=u.dtype)
        for r in range(iterations):
            s = (torch.softmax(b, dim=2).unsqueeze(-1) * u).sum(dim=1)
            v = saturating(squash, s)
            if r < iterations - 1:
                b = b + (u * v.unsqueeze(1)).sum(dim=-1)
        return v, s

    for st in (False, True):
        with straight_through() if st else torch.enable_grad():
            v, s = DynamicRouting(iterations=iterations)(u_hat, return_pre_squash=True)
            (grad,) = torch.autograd.grad((v * w_v).sum() + (s * w_s).sum(), u_hat)
            v_ref, s_ref = reference(u_hat)
            (grad_ref,) = torch.autograd.grad((v_ref * w_v).sum() + (s_ref * w_s).sum(), u_hat)
        assert torch.allclose(v, v_ref, atol=1e-10) and torch.allclose(s, s_ref, atol=1e-10)
        assert torch.allclose(grad, grad_ref, atol=1e-10), f"straight_through={st}"
    assert torch.allclose(v, reference_routing(u_hat.detach(), iterations)[0], atol=1e-10)


@pytest.mark.parametrize("name", ["capsnet", "effcapsnet"])
def test_adaptive_logits_are_the_log_normalised_pre_squash_norms(name):
    model = tiny_model(name)
    x = torch.rand(6, 1, 28, 28)
    out = model(x)
    assert out.pre_squash is not None and out.pre_squash.shape == out.poses.shape
    logits, decided, _ = AdaptiveObjective(model)(x)
    assert torch.equal(logits, capsule_logits(out.pre_squash.norm(dim=-1)))
    assert torch.equal(decided, decisions(model, x))  # same argmax as the lengths: the squash is monotone


def test_pgd_adaptive_equals_pgd_when_the_squash_is_the_identity(monkeypatch):
    """With squash = identity, pre-squash norms are the lengths and the straight-through backward is the true one:
    the adaptive attack must then be standard PGD, image for image."""
    identity = lambda s, dim=-1, eps=0.0: s  # noqa: E731
    monkeypatch.setattr(capsules, "squash", identity)
    monkeypatch.setattr(routing, "squash", identity)
    model = tiny_model("capsnet")
    x = torch.rand(16, 1, 28, 28)
    y = decisions(model, x)
    ids, grid = torch.arange(16), [0.0, 0.02, 0.05]
    pgd = ATTACKS.get("pgd").run(model, x, y, ids, grid, SETTINGS)
    adaptive = ATTACKS.get("pgd_adaptive").run(model, x, y, ids, grid, SETTINGS)
    for eps in grid:
        assert torch.equal(pgd.broken[eps], adaptive.broken[eps])
        assert torch.equal(pgd.adversarial[eps], adaptive.adversarial[eps])
    assert pgd.broken[0.05].any() and not pgd.broken[0.02].all(), "the known answer needs both outcomes"


def test_pgd_adaptive_follows_a_different_gradient_through_a_real_squash():
    model = tiny_model("capsnet")
    x = torch.rand(4, 1, 28, 28, requires_grad=True)
    y = decisions(model, x)
    grads = []
    objectives = [
        *ATTACKS.get("pgd").make_objectives(model, SETTINGS),
        *ATTACKS.get("pgd_adaptive").make_objectives(model, SETTINGS),
    ]
    for objective in objectives:  # standard; pre-squash with the exact backward; pre-squash with BPDA
        logits = objective(x).logits
        grads.append(torch.autograd.grad(torch.nn.functional.cross_entropy(logits, y), x)[0])
    assert len(grads) == 3 and not torch.allclose(grads[0], grads[1]) and not torch.allclose(grads[1], grads[2])


@pytest.mark.parametrize("name", list_models())
def test_attacks_that_do_not_apply_say_why(name):
    model = tiny_model(name)
    sample = torch.rand(1, 1, 28, 28)
    vote = ATTACKS.get("vote").applies_to(model, sample)
    adaptive = ATTACKS.get("pgd_adaptive").applies_to(model, sample)
    assert (vote is None) == (name in VOTE_MODELS)
    assert (adaptive is None) == model.is_capsule
    for reason in (vote, adaptive):
        assert reason is None or len(reason) > 20


@pytest.mark.parametrize("name", VOTE_MODELS)
def test_vote_surrogate_has_the_models_shape_and_gradients(name):
    model = tiny_model(name)
    x = torch.rand(5, 1, 28, 28, requires_grad=True)
    logits = model.vote_logits(x)
    assert logits.shape == (5, 10) and torch.isfinite(logits).all()
    (grad,) = torch.autograd.grad(logits.logsumexp(dim=1).sum() - logits[:, 0].sum(), x)
    assert torch.isfinite(grad).all() and grad.abs().sum() > 0


def test_capsnet_vote_surrogate_is_the_squashed_mean_vote():
    model = tiny_model("capsnet")
    x = torch.rand(3, 1, 28, 28)
    votes = model.votes(model.primary(torch.relu(model.conv(x))))  # (B, in, classes, D)
    expected = capsule_logits(squash(votes.sum(dim=1) / votes.shape[1]).norm(dim=-1))
    assert torch.allclose(model.vote_logits(x), expected, atol=1e-6)
