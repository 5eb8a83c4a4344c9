"""Adversarial training (train.adversarial=pgd): every training batch is replaced by its L-inf PGD adversarial
examples before the update, Madry et al.'s min-max protocol, for any registered model."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from capsbench.errors import CapsbenchError
from capsbench.models import Classifier


def pgd_training_examples(
    model: Classifier, images: torch.Tensor, labels: torch.Tensor, *, eps: float, steps: int, step_size: float,
    generator: torch.Generator,
) -> torch.Tensor:
    """L-inf PGD with a uniform random start in the eps-ball, `steps` signed-gradient ascent steps of `step_size` on
    the cross-entropy of the model's attack logits, each projected onto the eps-ball and [0, 1]; the last iterate.

    "Towards Deep Learning Models Resistant to Adversarial Attacks", Madry, Makelov, Schmidt, Tsipras, Vladu,
    arXiv:1706.06083 (MNIST: eps 0.3, 40 steps of 0.01). The loss is the one the robustness suite's PGD starts with
    (log-normalised lengths for capsules, logits for CNNs), so the model is trained against the attack it is
    evaluated with. The examples are generated with the model in eval mode (batch-norm running statistics and no
    dropout, as TRADES does; the attack's forward passes leave the running statistics untouched), then the
    model's mode is restored for the update. Only the input gets gradients.

    Args:
        model: the classifier being trained. images: (B, C, H, W) in [0, 1]; labels: (B,) class indices.
        eps, steps, step_size: the L-inf radius, ascent steps and step size (pixels in [0, 1]).
        generator: the epoch's generator (CPU, or on the device when the protocol augments there) for the random
            start, so a resumed run draws the same starts; noise: (B, C, H, W) in [-1, 1].
    Returns (B, C, H, W) adversarial images in [0, 1], detached.
    """
    if labels.dim() != 1:
        raise CapsbenchError("train.adversarial=pgd needs single-label targets (B,), got multi-hot targets "
                             f"{tuple(labels.shape)}; train multi-label suites (overlap) without train.adversarial")
    lower, upper = (images - eps).clamp(min=0.0), (images + eps).clamp(max=1.0)
    noise = torch.rand(images.shape, generator=generator, device=generator.device).to(images.device).mul_(2.0).sub_(1.0)
    x = torch.min(torch.max(images + eps * noise, lower), upper)
    was_training = model.training
    model.eval()
    try:
        for _ in range(steps):
            x.requires_grad_(True)
            loss = F.cross_entropy(model(x).logits, labels)
            (grad,) = torch.autograd.grad(loss, x)
            x = torch.min(torch.max(x.detach() + step_size * grad.sign(), lower), upper)
    finally:
        model.train(was_training)
    return x.detach()


def adversarial_identity(train) -> dict[str, object] | None:
    """The adversarial-training settings that change the weights (for the checkpoint key), None when off."""
    if train.adversarial is None:
        return None
    settings = {
        "method": train.adversarial,
        "eps": train.adv_eps,
        "steps": train.adv_steps,
        "step_size": train.adv_step_size,
    }
    return {**settings, "ramp_epochs": train.adv_ramp_epochs} if train.adv_ramp_epochs else settings
