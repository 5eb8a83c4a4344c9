"""Capsule-adaptive attacks: the straight-through switch, pre-squash capsules, pgd_adaptive reducing to PGD when the
squash is the identity, the vote surrogates, and attacks that do not apply being skipped with a reason."""

from dataclasses import dataclass, replace

import pytest
import torch
from test_attacks import SETTINGS, attack, tiny_model
from test_routing import reference_routing

from capsbench import list_models
from capsbench.attacks import build, decisions
from capsbench.attacks.engine import RowEngine
from capsbench.attacks.losses import targeted_margin
from capsbench.attacks.objectives import FORWARDS, AdaptiveObjective, Objective, RawEvidenceObjective, raw_evidence
from capsbench.layers import capsules, routing
from capsbench.layers.capsules import capsule_logits, squash
from capsbench.layers.routing import DynamicRouting
from capsbench.layers.straight_through import saturating, straight_through

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
    objective = AdaptiveObjective()
    forward = FORWARDS[objective.forward](model, x)
    logits, decided = objective.logits(forward, x), objective.decided(forward, x)
    assert torch.equal(logits, capsule_logits(out.pre_squash.norm(dim=-1)))
    assert torch.equal(decided, decisions(model, x))  # same argmax as the lengths: the squash is monotone


def test_pgd_adaptive_begins_as_pgd_when_the_squash_is_the_identity(monkeypatch):
    """With squash = identity, pre-squash norms are the lengths and the straight-through backward is the true one:
    the adaptive attack's first passes are then standard PGD, image for image (same breaks, same adversarial images),
    and its raw-evidence passes can only break more."""
    identity = lambda s, dim=-1, eps=0.0: s  # noqa: E731
    monkeypatch.setattr(capsules, "squash", identity)
    monkeypatch.setattr(routing, "squash", identity)
    model = tiny_model("capsnet")
    x = torch.rand(16, 1, 28, 28)
    y = decisions(model, x)
    grid = [0.0, 0.02, 0.05]
    pgd = attack("pgd", model, x, y, grid)
    adaptive = attack("pgd_adaptive", model, x, y, grid)
    for eps in grid:
        assert torch.equal(pgd.broken[eps] & adaptive.broken[eps], pgd.broken[eps])
        assert torch.equal(pgd.adversarial[eps][pgd.broken[eps]], adaptive.adversarial[eps][pgd.broken[eps]])
    assert pgd.broken[0.05].any() and not pgd.broken[0.02].all(), "the known answer needs both outcomes"
    first_passes = [p for p in build("pgd_adaptive", {"targets": 0}).passes(0.05, 10)
                    if p.objective.__class__.__name__ in ("PreSquashObjective", "AdaptiveObjective")]
    assert [(p.loss, p.restart, p.stream) for p in first_passes] == [(p.loss, p.restart, p.stream)
                                                                     for p in build("pgd").passes(0.05, 10)] * 2


def test_pgd_adaptive_follows_a_different_gradient_through_a_real_squash():
    model = tiny_model("capsnet")
    x = torch.rand(4, 1, 28, 28, requires_grad=True)
    y = decisions(model, x)
    grads = []
    objectives = [*build("pgd").objectives, *build("pgd_adaptive").objectives]
    for objective in objectives:  # standard; pre-squash with the exact backward; pre-squash with BPDA
        logits = objective.logits(FORWARDS[objective.forward](model, x), x)
        grads.append(torch.autograd.grad(torch.nn.functional.cross_entropy(logits, y), x)[0])
    assert len(grads) == 3 and not torch.allclose(grads[0], grads[1]) and not torch.allclose(grads[1], grads[2])


@pytest.mark.parametrize("name", list_models())
def test_attacks_that_do_not_apply_say_why(name):
    model = tiny_model(name)
    sample = torch.rand(1, 1, 28, 28)
    vote = build("vote").applies_to(model, sample)
    adaptive = build("pgd_adaptive").applies_to(model, sample)
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


def test_targeted_margin_and_the_ranked_targets_known_answers():
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.5], [5.0, -1.0, 0.5, 4.0]])
    labels = torch.tensor([0, 0])
    assert torch.equal(targeted_margin(logits, labels, torch.tensor([2, 3])), torch.tensor([1.0, -1.0]))

    @dataclass(frozen=True)
    class Fixed(Objective):
        def logits(self, out, x):
            return logits

    engine = RowEngine(tiny_model(), torch.zeros(2, 1, 28, 28), labels, [0, 1], [0.0], SETTINGS)
    ranked = engine._rank({Fixed()})[Fixed()]  # the engine's target of rank k is column k - 1
    assert ranked[:, 0].tolist() == [1, 3]  # the runner-ups
    assert ranked[:, 1].tolist() == [2, 2]
    assert ranked[:, 2].tolist() == [3, 1]


@pytest.mark.parametrize("name", list_models())
def test_the_raw_evidence_ranks_classes_as_the_model_decides(name):
    model = tiny_model(name)
    out = model(torch.rand(5, 1, 28, 28))
    assert torch.equal(raw_evidence(out).argmax(dim=1), out.scores.argmax(dim=1))
    if out.pre_squash is not None:  # vector capsules: the norms before the squash, which never saturate
        assert torch.allclose(raw_evidence(out), out.pre_squash.norm(dim=-1))


def test_pgd_adaptive_runs_a_raw_margin_and_a_multi_targeted_pass_within_its_stated_budget():
    adaptive = build("pgd_adaptive", {"restarts": 2, "steps": 10})
    passes = adaptive.passes(0.1, 10)
    raw = [p for p in passes if isinstance(p.objective, RawEvidenceObjective)]
    assert [(p.loss, p.restart) for p in raw[:2]] == [("margin", 0), ("margin", 1)]
    assert [(p.loss, p.target) for p in raw[2:]] == [("targeted", k) for k in range(1, 10)]  # every other class
    assert len(passes) == 2 * 2 * 2 + 2 + 9
    assert len(build("pgd_adaptive", {"targets": 3}).passes(0.1, 10)) == 2 * 2 + 1 + 3
    assert "targeted raw margin towards every other class" in adaptive.budget(10)
    no_targets = build("pgd_adaptive", {"targets": 0, "steps": 10})  # the quick budget's: APGD-T covers the targets
    assert len(no_targets.passes(0.1, 10)) == 2 * 2 + 1
    assert no_targets.cost(0.1, 10) == (2 * 2 + 1) * 2 * (10 + 1)  # a forward and a backward pass per iterate
    assert "targeted" not in no_targets.budget(10)


def test_bf16_attacks_count_only_breaks_the_fp32_model_confirms():
    """Under bf16 autocast an iterate may fool the rounded model only, or only the fp32 one: the fp32 model judges."""
    model = tiny_model("capsnet")
    x = torch.rand(16, 1, 28, 28)
    y = decisions(model, x)
    bf16 = replace(SETTINGS, precision="bf16")
    for name in ("pgd", "pgd_adaptive", "vote"):
        result = attack(name, model, x, y, [0.0, 0.05], bf16)
        assert not result.broken[0.0].any()
        assert torch.equal(result.broken[0.05], decisions(model, result.adversarial[0.05]) != y)  # fp32 decisions
        assert result.broken[0.05].any(), "the known answer needs a break"
