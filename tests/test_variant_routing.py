"""Known answers for EM routing, self-attention routing, self-routing and the variants' losses and sizes."""

import math

import pytest
import torch

from capsbench import create_model
from capsbench.layers.em_routing import EMRouting, e_step, m_step
from capsbench.layers.self_attention_routing import SelfAttentionRouting, exp_squash
from capsbench.layers.self_routing import SelfRouting2d
from capsbench.models.capsnet_em import spread_loss


def reference_em(votes, a_in, beta_u, beta_a, lam, iterations, min_variance=0.01, eps=1e-6):
    """Procedure 1 written out literally in float64, with explicit Gaussian densities."""
    n, n_out, n_in, p = votes.shape
    r = torch.full((n, n_out, n_in), 1.0 / n_out, dtype=torch.float64)
    for it in range(iterations):
        rw = r * a_in[:, None, :]
        r_sum = rw.sum(-1)
        mu = (rw[..., None] * votes).sum(2) / (r_sum[..., None] + eps)
        sigma2 = (rw[..., None] * (votes - mu[:, :, None]) ** 2).sum(2) / (r_sum[..., None] + eps) + min_variance
        cost = (beta_u[None, :, None] + torch.log(torch.sqrt(sigma2))) * r_sum[..., None]
        a = torch.sigmoid(lam * (beta_a[None] - cost.sum(-1)))
        if it < iterations - 1:
            dens = torch.exp(-((votes - mu[:, :, None]) ** 2) / (2 * sigma2[:, :, None]))
            dens = (dens / torch.sqrt(2 * math.pi * sigma2[:, :, None])).prod(-1)  # (N, out, in)
            r = a[..., None] * dens / (a[..., None] * dens).sum(1, keepdim=True)
    return mu, a


def test_em_routing_matches_a_literal_float64_procedure_1():
    torch.manual_seed(0)
    votes, a_in = torch.randn(4, 3, 7, 16, dtype=torch.float64), torch.rand(4, 7, dtype=torch.float64)
    routing = EMRouting(out_types=3, iterations=3, inverse_temperature=0.05).double()
    with torch.no_grad():
        routing.beta_u.copy_(torch.tensor([0.1, -0.2, 0.3]))
        routing.logit_bias.copy_(torch.tensor([1.0, 0.0, -1.0]))  # lambda beta_a
    mu, logits = routing(votes, a_in)
    a = torch.sigmoid(logits)
    beta_a = routing.logit_bias.detach() / 0.05
    ref_mu, ref_a = reference_em(votes, a_in, routing.beta_u.detach(), beta_a, 0.05, 3)
    # the moment-expanded variance differs from the literal one only through the epsilons (~1e-6)
    assert torch.allclose(mu, ref_mu, atol=1e-5) and torch.allclose(a, ref_a, atol=1e-5)
    assert not torch.allclose(a, torch.full_like(a, a.mean().item()), atol=1e-3)  # a non-trivial case


def test_em_assignments_sum_to_one_over_parents_and_activations_in_open_interval():
    torch.manual_seed(1)
    routing = EMRouting(out_types=5, iterations=3)
    mu, logits, r = routing(torch.randn(6, 5, 20, 16), torch.rand(6, 20), return_assignments=True)
    a = torch.sigmoid(logits)
    assert torch.allclose(r.sum(dim=1), torch.ones(6, 20), atol=1e-6)
    assert ((a > 0) & (a < 1)).all() and mu.shape == (6, 5, 16)


def test_em_e_step_assigns_each_vote_to_the_gaussian_it_came_from():
    mu = torch.tensor([[[0.0] * 16, [10.0] * 16]])  # (1, 2 parents, 16)
    sigma2 = torch.ones(1, 2, 16)
    votes = torch.stack([torch.zeros(16), torch.full((16,), 10.0)]).expand(
        1, 2, 2, 16
    )  # child 0 at mu_0, child 1 at mu_1
    r = e_step(mu, sigma2, torch.zeros(1, 2), votes, votes**2)  # equal activations 0.5; r (1, out, in)
    assert torch.allclose(r[0], torch.eye(2), atol=1e-6)


def test_em_identical_votes_do_not_collapse_the_variance():
    votes = torch.ones(2, 3, 8, 16, requires_grad=True)  # every child agrees exactly: sigma^2 would be 0
    mu, sigma2, logits = m_step(
        torch.full((2, 3, 8), 1 / 3),
        torch.rand(2, 8),
        votes,
        votes**2,
        torch.zeros(3),
        torch.zeros(3),
        0.01,
        min_variance=0.01,
    )
    assert torch.allclose(sigma2, torch.full_like(sigma2, 0.01), atol=1e-6) and torch.isfinite(logits).all()
    logits.sum().backward()
    assert torch.isfinite(votes.grad).all()


def test_em_gradients_finite_at_three_iterations():
    torch.manual_seed(2)
    votes = torch.randn(3, 4, 12, 16, requires_grad=True)
    a_in = torch.rand(3, 12, requires_grad=True)
    routing = EMRouting(out_types=4, iterations=3)
    mu, logits = routing(votes, a_in)
    (mu.square().mean() + torch.sigmoid(logits).sum()).backward()
    for g in (votes.grad, a_in.grad, routing.beta_u.grad, routing.logit_bias.grad):
        assert g is not None and torch.isfinite(g).all() and g.abs().sum() > 0


def test_capsnet_em_default_is_the_papers_small_model():
    # conv 25*64+64, primary 64*8*16+128 + 64*8+8, caps1 9*8*16*16+32, caps2 9*16*16*16+32, class 16*10*16+20
    model = create_model("capsnet_em", num_classes=10)
    assert sum(p.numel() for p in model.parameters()) == 68_444  # paper: "68K" for A=64, B=8, C=D=16


def test_spread_loss_known_values_and_margin_schedule():
    a = torch.tensor([[0.9, 0.5, 0.1]])
    # target 0: gaps 0.4 and 0.8; margin 0.9 -> (0.5)^2 + (0.1)^2
    assert math.isclose(spread_loss(a, torch.tensor([0]), 0.9).item(), 0.26, rel_tol=1e-5)
    assert spread_loss(a, torch.tensor([0]), 0.2).item() == 0.0
    model = create_model("capsnet_em", a_channels=4, b_types=2, c_types=2, d_types=2, margin_steps=10)
    assert math.isclose(model.margin(), 0.2)
    model.steps.fill_(5)
    assert math.isclose(model.margin(), 0.55) and "steps" in model.state_dict()


def test_self_attention_coupling_sums_to_one_over_parents():
    torch.manual_seed(3)
    layer = SelfAttentionRouting(in_caps=6, in_dim=4, out_caps=5, out_dim=3)
    votes = torch.einsum("bid,jide->bjie", torch.randn(2, 6, 4), layer.weight)
    c = layer.coupling(votes)  # (B, out, in)
    assert torch.allclose(c.sum(dim=1), torch.ones(2, 6), atol=1e-6)
    # hand computation for one (image, parent, child): softmax over parents of sum_k <u_i, u_k> / sqrt(3)
    logits = torch.einsum("bjie,bjke->bji", votes, votes) / math.sqrt(3)
    assert torch.allclose(c, torch.softmax(logits, dim=1), atol=1e-6)


def test_exp_squash_norms_and_direction():
    s = torch.tensor([[3.0, 4.0], [0.0, 0.0]])
    v = exp_squash(s)
    assert math.isclose(v[0].norm().item(), 1 - math.exp(-5), rel_tol=1e-5)
    assert torch.allclose(v[0] / v[0].norm(), torch.tensor([0.6, 0.8])) and torch.equal(v[1], torch.zeros(2))


def test_efficient_capsnet_paper_parameter_count():
    # stem convs 832 + 18,496 + 36,928 + 73,856, BN affine 2*(32+64+64+128), depthwise 9*9*128+128,
    # W 10*16*8*16, prior 10*16 = 161,824 (Mazzia et al. 2021, MNIST); the decoder comes on top.
    assert sum(p.numel() for p in create_model("effcapsnet", decoder_hidden=()).parameters()) == 161_824


def test_efficient_capsnet_smallnorb_shape_as_the_authors_build_it():
    """EscVM/Efficient-CapsNet's smallNORB model, by hand: conv 2*49*32+32 = 3,168, 18,496, 36,928, 73,856; norm
    affine 2*(32+64+64+128) = 576; depthwise 8x8 over 128 maps 8,320; W 5*16*8*16 = 10,240, prior 5*16 = 80: 151,664
    on its 2-channel 48x48 input. On capsbench's smallNORB (the left image in 32x32 crops) the grid is 4x4: 143,952."""
    stem = {"kernels": (7, 3, 3, 3), "strides": (2, 1, 1, 2), "decoder_hidden": (), "num_classes": 5}
    authors = create_model("effcapsnet", in_channels=2, image_size=48, **stem)
    assert sum(p.numel() for p in authors.parameters()) == 151_664 and authors.primary.kernel_size == (8, 8)
    here = create_model("effcapsnet", in_channels=1, image_size=32, **stem)
    assert sum(p.numel() for p in here.parameters()) == 143_952
    with pytest.raises(ValueError, match="too small for this Efficient-CapsNet stem"):
        create_model("effcapsnet", image_size=12, **stem)


def test_self_routing_coupling_and_activations():
    torch.manual_seed(4)
    layer = SelfRouting2d(in_types=3, out_types=4, in_dim=2, out_dim=5, kernel_size=3, stride=2, padding=1)
    a, pose = torch.rand(2, 3, 6, 6), torch.randn(2, 6, 6, 6)
    c = layer.routing(layer._patches(pose, 2))
    assert torch.allclose(c.sum(dim=-1), torch.ones(c.shape[:-1]), atol=1e-6)
    a_out, pose_out = layer(a, pose)
    assert a_out.shape == (2, 4, 3, 3) and pose_out.shape == (2, 20, 3, 3)
    assert ((a_out >= 0) & (a_out <= 1)).all()
    # a fully connected layer distributes all activation: parent activations sum to 1
    fc = SelfRouting2d(in_types=3, out_types=4, in_dim=2, out_dim=1, kernel_size=6, pose_out=False)
    a_fc, _ = fc(a, pose)
    assert torch.allclose(a_fc.flatten(1).sum(1), torch.ones(2), atol=1e-5)


def test_self_routing_single_child_passes_its_vote_through():
    layer = SelfRouting2d(in_types=1, out_types=2, in_dim=3, out_dim=2, kernel_size=1)
    pose = torch.randn(1, 3, 1, 1)
    a_out, pose_out = layer(torch.full((1, 1, 1, 1), 0.7), pose)
    c = layer.routing(pose.view(1, 1, 1, 3))[0, 0, 0]  # (2,)
    assert torch.allclose(a_out.flatten(), c, atol=1e-6)  # a_j = c_j a / a
    votes = (layer.pose_weight[0] @ pose.flatten()).view(2, 2)
    assert torch.allclose(pose_out.view(2, 2), votes, atol=1e-5)  # the only child's vote is the pose
