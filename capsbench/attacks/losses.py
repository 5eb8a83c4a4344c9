"""The losses gradient attacks maximise on (B, C) class logits or evidence, untargeted and targeted: cross-entropy, the
Carlini-Wagner margin (arXiv:1608.04644) and the Difference of Logits Ratio of Croce and Hein, "Reliable evaluation of
adversarial robustness with an ensemble of diverse parameter-free attacks" (arXiv:2003.01690, sec. 4), which is
invariant to shifting and rescaling the logits, so that one step-size schedule fits models whose evidence lives on
any scale (CNN logits, capsule norms)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.nn import functional as F

DLR_EPS = 1e-12  # keeps DLR's denominator positive where the top classes tie (the authors' code)


def margin(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Carlini-Wagner margin max_{j != y} z_j - z_y per example: (B, C), (B,) -> (B,); > 0 means misclassified."""
    true = logits.gather(1, labels[:, None]).squeeze(1)  # (B,)
    mask = torch.zeros_like(logits, dtype=torch.bool).scatter_(1, labels[:, None], True)  # one_hot would check labels
    return logits.masked_fill(mask, float("-inf")).amax(dim=1) - true


def targeted_margin(logits: torch.Tensor, labels: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """z_t - z_y per example: (B, C), (B,), (B,) -> (B,); > 0 means the target class outranks the true one."""
    return logits.gather(1, targets[:, None]).squeeze(1) - logits.gather(1, labels[:, None]).squeeze(1)


def dlr(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """DLR loss -(z_y - max_{j != y} z_j) / (z_pi1 - z_pi3) per example, z_pi sorted decreasing: (B, C), (B,) -> (B,).
    Needs at least 3 classes."""
    z = logits.float()
    top = z.topk(3, dim=1).values  # (B, 3)
    return margin(z, labels) / (top[:, 0] - top[:, 2] + DLR_EPS)


def targeted_dlr(logits: torch.Tensor, labels: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Targeted DLR -(z_y - z_t) / (z_pi1 - (z_pi3 + z_pi4) / 2) per example: (B, C), (B,), (B,) -> (B,). Needs at
    least 4 classes."""
    z = logits.float()
    top = z.topk(4, dim=1).values  # (B, 4)
    return targeted_margin(z, labels, targets) / (top[:, 0] - 0.5 * (top[:, 2] + top[:, 3]) + DLR_EPS)


UNTARGETED: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "ce": lambda logits, labels: F.cross_entropy(logits, labels, reduction="none"),
    "margin": margin,
    "dlr": dlr,
}
TARGETED: dict[str, Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "targeted": targeted_margin,  # towards a target class: its evidence against the true class's
    "targeted_dlr": targeted_dlr,
}
MIN_CLASSES = {"dlr": 3, "targeted_dlr": 4}  # DLR's denominator reads the 3rd (targeted: 4th) largest logit


def loss_values(loss: str, logits: torch.Tensor, labels: torch.Tensor, targets: torch.Tensor | None) -> torch.Tensor:
    """(B,) the loss named `loss` per example, the quantity an attack ascends; targets (B,) for a targeted loss."""
    if loss in TARGETED:
        return TARGETED[loss](logits, labels, targets)
    return UNTARGETED[loss](logits, labels)
