"""The base of the vector-capsule models (CapsNet, Efficient-CapsNet): Sabour et al.'s margin loss + reconstruction
error, per object for MultiMNIST components."""

from __future__ import annotations

import torch

from capsbench.layers.capsules import Decoder, margin_loss, reconstruction_loss
from capsbench.models.base import Classifier, ModelOutput


def margin_reconstruction_loss(
    out: ModelOutput,
    labels: torch.Tensor,
    images: torch.Tensor,
    decoder: Decoder | None,
    recon_weight: float,
    components: torch.Tensor | None = None,
    component_labels: torch.Tensor | None = None,
) -> torch.Tensor:
    """Margin loss + recon_weight x sum-squared reconstruction error (Sabour et al.).

    With components (B, K, C_in, H, W) and component_labels (B, K) (MultiMNIST), each object is
    reconstructed from its own class capsule and the K errors are summed (Sabour et al., section 6).
    """
    loss = margin_loss(out.scores, labels)
    if decoder is None or recon_weight <= 0:
        return loss
    if components is not None:
        errors = [
            reconstruction_loss(decoder(out.poses, component_labels[:, k]), components[:, k])
            for k in range(components.shape[1])
        ]
        return loss + recon_weight * torch.stack(errors).sum()
    if out.reconstructions is not None:
        loss = loss + recon_weight * reconstruction_loss(out.reconstructions, images)
    return loss


class VectorCapsuleClassifier(Classifier):
    """Base of the vector-capsule models with an optional reconstruction decoder (CapsNet, Efficient-CapsNet): their
    loss is Sabour et al.'s margin loss + recon_weight x sum-squared reconstruction error. Subclasses set
    `self.decoder` (a Decoder, or None without reconstruction) and `self.recon_weight`."""

    is_capsule = True
    decoder: Decoder | None
    recon_weight: float

    def loss(
        self,
        out: ModelOutput,
        labels: torch.Tensor,
        images: torch.Tensor,
        *,
        components: torch.Tensor | None = None,
        component_labels: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Margin loss + reconstruction error; per object with components (see margin_reconstruction_loss)."""
        return margin_reconstruction_loss(out, labels, images, self.decoder, self.recon_weight,
                                          components, component_labels)
