"""Known-answer tests for the capsule maths: squash, margin loss, capsule logits, votes, decoder masking."""

import math

import torch

from capsbench.layers.capsules import CapsuleVotes, Decoder, capsule_logits, margin_loss, squash


def test_squash_norms_in_unit_interval_and_direction_kept():
    s = torch.randn(1000, 16, dtype=torch.float64) * torch.logspace(-3, 3, 1000, dtype=torch.float64).unsqueeze(1)
    v = squash(s)  # float64: in float32 the norm of a huge vector rounds to exactly 1
    norms = v.norm(dim=-1)
    assert (norms >= 0).all() and (norms < 1).all()
    assert (squash(s.float()).norm(dim=-1) <= 1 + 1e-6).all()
    n = s.norm(dim=-1)
    big = n > 0.1  # below that the epsilon inside the square root shifts the norm measurably
    assert torch.allclose(norms[big], (n**2 / (1 + n**2))[big], rtol=1e-6)
    cos = torch.nn.functional.cosine_similarity(v, s, dim=-1)
    assert torch.allclose(cos[n > 1e-2], torch.ones_like(cos[n > 1e-2]), atol=1e-9)


def test_squash_of_zero_is_zero_with_finite_gradient():
    s = torch.zeros(3, 8, requires_grad=True)
    v = squash(s)
    assert torch.equal(v, torch.zeros_like(v))
    v.sum().backward()
    assert torch.isfinite(s.grad).all()


def test_margin_loss_known_values():
    lengths = torch.tensor([[0.95, 0.05, 0.5], [0.2, 0.8, 0.0]])
    labels = torch.tensor([0, 2])
    # sample 0: present 0 (0.95 > 0.9); absent: 0.5 * (0.5 - 0.1)^2 = 0.08 (0.05 < 0.1 adds nothing)
    # sample 1: present (0.9 - 0)^2 = 0.81; absent 0.5 * ((0.2 - 0.1)^2 + (0.8 - 0.1)^2) = 0.25
    expected = (0.08 + 0.81 + 0.25) / 2
    assert math.isclose(margin_loss(lengths, labels).item(), expected, rel_tol=1e-6)
    multi_hot = torch.tensor([[1, 0, 0], [0, 0, 1]])
    assert math.isclose(margin_loss(lengths, multi_hot).item(), expected, rel_tol=1e-6)


def test_capsule_logits_preserve_argmax_and_normalise():
    lengths = torch.rand(50, 10) * 0.999
    logits = capsule_logits(lengths)
    assert torch.equal(logits.argmax(1), lengths.argmax(1))
    probs = torch.softmax(logits, dim=1)
    assert torch.allclose(probs, lengths / lengths.sum(1, keepdim=True), atol=1e-5)
    assert torch.isfinite(capsule_logits(torch.zeros(2, 10))).all()


def test_votes_equal_per_capsule_matrix_products():
    votes = CapsuleVotes(in_caps=5, in_dim=3, out_caps=4, out_dim=2, init_std=1.0)
    u = torch.randn(6, 5, 3)
    out = votes(u)
    w = votes.weight.view(5, 3, 4, 2)
    for b in range(6):
        for i in range(5):
            for j in range(4):
                assert torch.allclose(out[b, i, j], u[b, i] @ w[i, :, j, :], atol=1e-6)


def test_decoder_masks_all_but_one_class():
    dec = Decoder(num_classes=3, caps_dim=2, hidden=(4,), image_shape=(1, 2, 2))
    poses = torch.randn(2, 3, 2)
    changed = poses.clone()
    changed[:, 1:] = torch.randn(2, 2, 2)  # only non-selected classes change
    mask = torch.tensor([0, 0])
    assert torch.allclose(dec(poses, mask), dec(changed, mask))


def test_squash_backward_equals_autograd_including_zero():
    from capsbench.layers.capsules import squash_backward

    torch.manual_seed(0)
    s = torch.randn(6, 5, 16, dtype=torch.float64) * torch.logspace(-5, 2, 5, dtype=torch.float64).view(1, 5, 1)
    s[0, 0] = 0.0
    s.requires_grad_()
    grad_v = torch.randn(6, 5, 16, dtype=torch.float64)
    (expected,) = torch.autograd.grad(squash(s), s, grad_v)
    assert torch.allclose(squash_backward(s.detach(), grad_v), expected, rtol=1e-12, atol=1e-12)


def test_squash_gradients_match_the_plain_formula_twice_differentiably():
    s = torch.randn(3, 7, 5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(squash, (s,))
    assert torch.autograd.gradgradcheck(squash, (s,))


def test_squash_runs_bf16_inputs_in_fp32():
    s = torch.randn(4, 16) * 30
    assert torch.equal(squash(s.bfloat16()), squash(s.bfloat16().float()))
    assert squash(s.bfloat16()).dtype == torch.float32
