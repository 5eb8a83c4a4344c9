"""EM routing between matrix capsules (Hinton, Sabour, Frosst, "Matrix capsules with EM routing", ICLR 2018)."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

EM_EPS = 1e-6  # added to responsibility sums: no division by zero
MIN_VARIANCE = 0.01  # floor of every parent's variance: no collapse onto a few identical votes, log sigma >= -2.3


def m_step(
    r: torch.Tensor, a_in: torch.Tensor, votes: torch.Tensor, votes_sq: torch.Tensor,
    beta_u: torch.Tensor, logit_bias: torch.Tensor, inverse_temperature: float, min_variance: float = MIN_VARIANCE,
    eps: float = EM_EPS,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Procedure 1's M-step: Gaussian parents fitted to the activation-weighted votes.

    r (N, out, in), a_in (N, in), votes and votes_sq = votes**2 (N, out, in, P), logit_bias = lambda beta_a (out,)
    -> mu (N, out, P), sigma2 (N, out, P) >= min_variance, activation logits lambda (beta_a - sum_h cost_h) (N, out);
    the activations are their logistic. Moments are batched matmuls over `in`.
    """
    r = r * a_in.unsqueeze(1)  # (N, out, in): R_ij <- R_ij a_i
    r_sum = r.sum(dim=-1, keepdim=True)  # (N, out, 1)
    coeff = (r / (r_sum + eps)).unsqueeze(-2)  # (N, out, 1, in)
    mu = (coeff @ votes).squeeze(-2)  # (N, out, P)
    sigma2 = ((coeff @ votes_sq).squeeze(-2) - mu * mu).clamp_min(0.0) + min_variance  # (N, out, P)
    cost = (beta_u.view(1, -1, 1) + 0.5 * torch.log(sigma2)) * r_sum  # (N, out, P)
    return mu, sigma2, logit_bias.view(1, -1) - inverse_temperature * cost.sum(dim=-1)  # (N, out)


def e_step(
    mu: torch.Tensor, sigma2: torch.Tensor, logits: torch.Tensor, votes: torch.Tensor, votes_sq: torch.Tensor
) -> torch.Tensor:
    """Procedure 1's E-step: R_ij = a_j p_j(V_ij) / sum_k a_k p_k(V_ik), in the log domain (no log of zero:
    log a_j = logsigmoid of the activation logit).

    mu, sigma2 (N, out, P), logits (N, out), votes, votes_sq (N, out, in, P) -> r (N, out, in), sums to 1 over out.
    sum_h (V - mu)^2 / (2 sigma2) is expanded into matmuls so that no (N, out, in, P) temporary is made.
    """
    inv = 0.5 / sigma2  # (N, out, P)
    quad = (votes_sq @ inv.unsqueeze(-1) - votes @ (2.0 * inv * mu).unsqueeze(-1)).squeeze(-1)  # (N, out, in)
    quad = quad + (inv * mu * mu).sum(dim=-1, keepdim=True)
    log_norm = 0.5 * torch.log(2.0 * math.pi * sigma2).sum(dim=-1, keepdim=True)  # (N, out, 1)
    log_a = F.logsigmoid(logits).unsqueeze(-1)  # (N, out, 1)
    return torch.softmax(log_a - log_norm - quad, dim=1)


class EMRouting(nn.Module):
    """EM routing (Procedure 1 of Hinton et al. 2018) of `in` child capsules to `out` parents.

    Each parent is a Gaussian over the P = 16 entries of the votes; R starts uniform, then M- and
    E-steps alternate, the last iteration ending on an M-step. beta_u and beta_a are learned per
    parent; the inverse temperature lambda is fixed per layer (the paper does not state its schedule).
    beta_a is stored as `logit_bias` = lambda beta_a, in the units of the activation logit: the same
    function, but an optimizer step moves the logit by O(lr) instead of O(lambda lr). Stored as beta_a,
    an activation logit moves ~1e-4 per Adam step at lambda = 0.01, so unused parents cannot fall below
    activation 0.5 within a short schedule and the spread loss's margin stays out of reach.

    Args:
        out_types: parents per routing problem (beta_u, beta_a have one entry each).
        iterations: EM iterations (paper: 3).
        inverse_temperature: lambda in a_j = logistic(lambda (beta_a - sum_h cost_h)).
        min_variance: floor added to every variance (the paper's epsilon against collapse).
    Shapes: votes (N, out, in, P), a_in (N, in) -> poses mu (N, out, P), activation logits (N, out)
        [, assignments R (N, out, in)]. Activations are sigmoid(logits); the logits do not saturate,
        so attacks and losses that need them keep their gradients.
    """

    def __init__(self, *, out_types: int, iterations: int = 3, inverse_temperature: float = 0.01,
                 min_variance: float = MIN_VARIANCE):
        super().__init__()
        if iterations < 1:
            raise ValueError(f"EM routing iterations must be >= 1, got {iterations}")
        if min_variance <= 0:
            raise ValueError(f"min_variance must be > 0 (it keeps log sigma finite), got {min_variance}")
        self.iterations, self.inverse_temperature, self.min_variance = iterations, inverse_temperature, min_variance
        self.beta_u = nn.Parameter(torch.zeros(out_types))
        self.logit_bias = nn.Parameter(torch.zeros(out_types))  # lambda beta_a

    def forward(self, votes: torch.Tensor, a_in: torch.Tensor, return_assignments: bool = False,
                iterations: int | None = None):
        """`iterations` overrides the layer's count for this call (1: one M-step on uniform assignments)."""
        n, n_out, n_in, _ = votes.shape
        iterations = self.iterations if iterations is None else iterations
        votes_sq = votes * votes
        r = votes.new_full((n, n_out, n_in), 1.0 / n_out)  # (N, out, in)
        for it in range(iterations):
            mu, sigma2, logits = m_step(
                r, a_in, votes, votes_sq, self.beta_u, self.logit_bias, self.inverse_temperature, self.min_variance
            )
            if it < iterations - 1:
                r = e_step(mu, sigma2, logits, votes, votes_sq)
        return (mu, logits, r) if return_assignments else (mu, logits)
