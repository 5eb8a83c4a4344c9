"""Self-routing capsule network (Hahn, Pyeon, Kim, "Self-Routing Capsule Networks", NeurIPS 2019) on a CNN backbone."""

from __future__ import annotations

import torch
from torch import nn

from capsbench.layers.capsules import LOG_EPS
from capsbench.layers.self_routing import SelfRouting2d
from capsbench.layers.straight_through import saturating
from capsbench.models.backbone import SmallBackbone
from capsbench.models.base import Classifier, ModelOutput, NotApplicable
from capsbench.models.resnet import ResNetTrunk, resnet_blocks


class SRCapsNet(Classifier):
    """Backbone -> primary capsules (pose + sigmoid activation) -> self-routing conv capsules -> class capsules.

    Class scores are the final layer's activations, which sum to 1 over classes; the model trains with
    their negative log-likelihood, as in the paper.

    Hahn et al. put the capsule layers on ResNet-20's convolutional trunk for CIFAR-10 and SVHN (its output,
    64 maps at 8x8, replaces the average pooling and linear layer); `backbone="resnet20"` builds that, and
    caps_layers 0 and 1 are then their SR-1 and SR-2 models. The default is a small 3-block CNN.

    Args:
        in_channels, image_size, num_classes: of the dataset.
        backbone: "small" (SmallBackbone, as cnn_avgpool) or a CIFAR ResNet trunk "resnetD", D = 6n + 2
            (ResNetTrunk: 16 filters, inputs mapped to [-1, 1]).
        backbone_channels, backbone_strides: of the "small" backbone only.
        caps_types, caps_dim: capsule types and pose dimension of every hidden capsule layer (paper: 32, 16).
        caps_layers: self-routing conv capsule layers (3x3, stride 2, padding 1) before the class layer.
    Shapes: (B, in_channels, H, W) -> scores (B, num_classes); poses None (the class layer has no poses).
    """

    is_capsule = True

    ARGUMENT_RANGES = {  # checked before any work (capsbench.models.ranges)
        "backbone_channels": "int [1, inf)",
        "backbone_strides": "int [1, inf)",
        "caps_types": "int [1, inf)",
        "caps_dim": "int [1, inf)",
        "caps_layers": "int [0, inf)",
    }

    def __init__(
        self,
        *,
        in_channels: int = 1,
        image_size: int = 28,
        num_classes: int = 10,
        backbone: str = "small",
        backbone_channels: tuple[int, ...] = (64, 128, 128),
        backbone_strides: tuple[int, ...] = (1, 2, 2),
        caps_types: int = 32,
        caps_dim: int = 16,
        caps_layers: int = 1,
    ):
        super().__init__()
        self.backbone: nn.Module
        if backbone == "small":
            self.backbone = SmallBackbone(in_channels=in_channels, channels=tuple(backbone_channels),
                                          strides=tuple(backbone_strides))
            size = SmallBackbone.output_size(image_size, tuple(backbone_strides))
        else:
            self.backbone = ResNetTrunk(in_channels=in_channels, blocks=resnet_blocks(backbone))
            size = ResNetTrunk.output_size(image_size)
        feat = self.backbone.out_channels
        self.primary_act = nn.Sequential(
            nn.Conv2d(feat, caps_types, 3, 1, 1), nn.BatchNorm2d(caps_types)
        )  # sigmoid below
        self.primary_pose = nn.Sequential(
            nn.Conv2d(feat, caps_types * caps_dim, 3, 1, 1), nn.BatchNorm2d(caps_types * caps_dim)
        )
        self.layers = nn.ModuleList()
        self.pose_norms = nn.ModuleList()
        for _ in range(caps_layers):
            self.layers.append(
                SelfRouting2d(
                    in_types=caps_types,
                    out_types=caps_types,
                    in_dim=caps_dim,
                    out_dim=caps_dim,
                    kernel_size=3,
                    stride=2,
                    padding=1,
                )
            )
            self.pose_norms.append(nn.BatchNorm2d(caps_types * caps_dim))
            size = (size - 1) // 2 + 1
        self.classes = SelfRouting2d(
            in_types=caps_types,
            out_types=num_classes,
            in_dim=caps_dim,
            out_dim=1,
            kernel_size=size,
            stride=1,
            padding=0,
            pose_out=False,
        )

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> ModelOutput:
        h = self.backbone(x)  # (B, feat, H', W')
        a = saturating(torch.sigmoid, self.primary_act(h))  # (B, A, H', W') activations in (0, 1)
        pose = self.primary_pose(h)  # (B, A*C, H', W')
        for layer, norm in zip(self.layers, self.pose_norms):
            a, pose = layer(a, pose)
            pose = norm(pose)
        a, _ = self.classes(a, pose)  # (B, num_classes, 1, 1)
        scores = a.flatten(1)  # (B, num_classes), sums to 1
        return ModelOutput(scores=scores, logits=torch.log(scores + LOG_EPS), evidence=scores)

    def vote_logits(self, x: torch.Tensor) -> torch.Tensor:
        raise NotApplicable(
            "self-routing has no vote surrogate: each child's coupling comes from its own routing network, and with "
            "uniform coupling every class activation equals 1/C"
        )

    def loss(self, out: ModelOutput, labels: torch.Tensor, images: torch.Tensor, **_components) -> torch.Tensor:
        if labels.dim() == 2:  # multi-hot: cross-entropy against the normalised target distribution
            target = labels.to(out.logits.dtype)
            target = target / target.sum(dim=1, keepdim=True).clamp_min(1.0)
            return -(target * out.logits).sum(dim=1).mean()
        return nn.functional.nll_loss(out.logits, labels)
