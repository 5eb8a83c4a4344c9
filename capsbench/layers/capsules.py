"""Capsule building blocks from Sabour, Frosst, Hinton, "Dynamic Routing Between Capsules" (arXiv:1710.09829)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from capsbench.layers.straight_through import saturating

SQUASH_EPS = 1e-8
LOG_EPS = 1e-8


def squash(s: torch.Tensor, dim: int = -1, eps: float = SQUASH_EPS) -> torch.Tensor:
    """v = |s|^2 / (1 + |s|^2) * s / sqrt(|s|^2 + eps): norms in [0, 1), zero maps to zero with finite grad.

    Computed in fp32 at least (bf16 / fp16 inputs are upcast; the result stays fp32). Differentiated by its
    closed form (squash_backward): a few fused-size ops instead of autograd's eight elementwise backward ops.
    """
    if s.dtype in (torch.float16, torch.bfloat16):
        s = s.float()
    if s.requires_grad and torch.is_grad_enabled() and not torch.jit.is_tracing():
        return _Squash.apply(s, dim, eps)
    return _squash(s, dim, eps)


def _squash(s: torch.Tensor, dim: int, eps: float) -> torch.Tensor:
    sq_norm = (s * s).sum(dim=dim, keepdim=True)
    return (sq_norm / (1.0 + sq_norm)) * s / torch.sqrt(sq_norm + eps)


class _Squash(torch.autograd.Function):
    """squash with its closed-form gradient (outputs bit-identical to the plain ops; twice differentiable)."""

    @staticmethod
    def forward(ctx, s: torch.Tensor, dim: int, eps: float) -> torch.Tensor:
        ctx.save_for_backward(s)
        ctx.dim, ctx.eps = dim, eps
        return _squash(s, dim, eps)

    @staticmethod
    def backward(ctx, grad_v: torch.Tensor):
        (s,) = ctx.saved_tensors
        return squash_backward(s, grad_v, ctx.dim, ctx.eps), None, None


def squash_backward(s: torch.Tensor, grad_v: torch.Tensor, dim: int = -1, eps: float = SQUASH_EPS) -> torch.Tensor:
    """The gradient of squash at s, by its closed form (written out so that torch.compile can trace routing's
    custom backward; equal to autograd's). With q = |s|^2 and v = g(q) s, g(q) = q / ((1 + q) sqrt(q + eps)):
    ds = g(q) dv + 2 g'(q) (s . dv) s, g'(q) = (1 / (1 + q) - q / (2 (q + eps))) / ((1 + q) sqrt(q + eps))."""
    sq_norm = (s * s).sum(dim=dim, keepdim=True)
    scale = 1.0 / ((1.0 + sq_norm) * torch.sqrt(sq_norm + eps))
    g = sq_norm * scale
    g_prime = (1.0 / (1.0 + sq_norm) - sq_norm / (2.0 * (sq_norm + eps))) * scale
    return g * grad_v + (2.0 * g_prime * (s * grad_v).sum(dim=dim, keepdim=True)) * s


def capsule_logits(lengths: torch.Tensor, eps: float = LOG_EPS) -> torch.Tensor:
    """Log-normalised capsule lengths, log(l / sum l) with an epsilon: logits for cross-entropy attacks."""
    return torch.log(lengths + eps) - torch.log(lengths.sum(dim=-1, keepdim=True) + eps)


def margin_loss(
    lengths: torch.Tensor,
    labels: torch.Tensor,
    *,
    m_pos: float = 0.9,
    m_neg: float = 0.1,
    lam: float = 0.5,
) -> torch.Tensor:
    """Sabour's margin loss, summed over classes and averaged over the batch.

    Args:
        lengths: (B, C) capsule lengths.
        labels: (B,) class indices, or (B, C) multi-hot targets.
    """
    targets = labels if labels.dim() == 2 else F.one_hot(labels, lengths.shape[1])
    targets = targets.to(lengths.dtype)
    present = targets * F.relu(m_pos - lengths) ** 2
    absent = lam * (1.0 - targets) * F.relu(lengths - m_neg) ** 2
    return (present + absent).sum(dim=1).mean()


class PrimaryCaps(nn.Module):
    """Convolutional primary capsules: one conv, regrouped into capsules and squashed.

    Args:
        in_channels: channels of the input feature map.
        num_types: capsule types (Sabour: 32); dim: capsule dimension (Sabour: 8).
        kernel_size, stride: of the convolution (Sabour: 9, 2).
    Shapes: (B, in_channels, H, W) -> (B, num_types * H' * W', dim).
    """

    def __init__(self, *, in_channels: int, num_types: int, dim: int, kernel_size: int = 9, stride: int = 2):
        super().__init__()
        self.num_types, self.dim = num_types, dim
        self.conv = nn.Conv2d(in_channels, num_types * dim, kernel_size, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x)
        b, _, hh, ww = h.shape
        h = h.view(b, self.num_types, self.dim, hh, ww).permute(0, 1, 3, 4, 2)  # (B, types, H', W', dim)
        return saturating(squash, h.reshape(b, self.num_types * hh * ww, self.dim))  # (B, in_caps, dim)


class CapsuleVotes(nn.Module):
    """Votes u_hat[b, i, j] = W[i, j] u[b, i] of every input capsule i for every output capsule j.

    Computed as one batched matmul over input capsules, so W is never copied per image.
    Shapes: u (B, in_caps, in_dim) -> u_hat (B, in_caps, out_caps, out_dim).
    """

    cost_part = "routing"  # efficiency reports: the transformation matrices W_ij are routing weights

    def __init__(self, *, in_caps: int, in_dim: int, out_caps: int, out_dim: int, init_std: float = 0.01):
        super().__init__()
        self.out_caps, self.out_dim = out_caps, out_dim
        self.weight = nn.Parameter(init_std * torch.randn(in_caps, in_dim, out_caps * out_dim))

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        b, in_caps, _ = u.shape
        votes = torch.bmm(u.transpose(0, 1), self.weight)  # (in_caps, B, out_caps * out_dim)
        return votes.transpose(0, 1).reshape(b, in_caps, self.out_caps, self.out_dim)


class Decoder(nn.Module):
    """Reconstruction decoder: class capsules masked to one class -> FC layers -> sigmoid image.

    Masked by the label when labels are given (training), by the longest capsule otherwise.
    Shapes: poses (B, C, D) -> (B, *image_shape).
    """

    cost_part = "decoder"  # efficiency reports: counted apart from the classifier

    def __init__(self, *, num_classes: int, caps_dim: int, hidden: tuple[int, ...], image_shape: tuple[int, int, int]):
        super().__init__()
        self.image_shape = image_shape
        sizes = [num_classes * caps_dim, *hidden]
        layers: list[nn.Module] = []
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(a, b), nn.ReLU(inplace=True)]
        n_pixels = image_shape[0] * image_shape[1] * image_shape[2]
        layers += [nn.Linear(sizes[-1], n_pixels), nn.Sigmoid()]
        self.net = nn.Sequential(*layers)

    def forward(self, poses: torch.Tensor, mask_classes: torch.Tensor) -> torch.Tensor:
        mask = F.one_hot(mask_classes, poses.shape[1]).to(poses.dtype)  # (B, C)
        flat = (poses * mask.unsqueeze(-1)).flatten(1)  # (B, C * D)
        return self.net(flat).view(-1, *self.image_shape)


def reconstruction_loss(reconstructions: torch.Tensor, images: torch.Tensor) -> torch.Tensor:
    """Sum of squared pixel errors per image, averaged over the batch (Sabour's reconstruction term)."""
    return ((reconstructions - images) ** 2).flatten(1).sum(dim=1).mean()


def decode(decoder: Decoder | None, poses: torch.Tensor, lengths: torch.Tensor,
           labels: torch.Tensor | None) -> torch.Tensor | None:
    """The forward pass's reconstruction: masked by the label, else by the longest capsule. None without a
    decoder or for multi-hot labels (the models' loss then reconstructs each object on its own)."""
    if decoder is None or (labels is not None and labels.dim() == 2):
        return None
    return decoder(poses, labels if labels is not None else lengths.argmax(dim=1))
