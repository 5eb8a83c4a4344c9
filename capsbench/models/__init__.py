"""Model registry: `create_model(name, **overrides)` and `list_models()`, timm-style."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

from capsbench.errors import CapsbenchError
from capsbench.models.base import Classifier, LogitsAdapter, ModelOutput
from capsbench.models.backbone import AvgPoolCNN
from capsbench.models.capsnet import CapsNet
from capsbench.models.capsnet_em import CapsNetEM
from capsbench.models.cnn import ConvNet
from capsbench.models.cnn_pooled import PooledConvNet
from capsbench.models.effcapsnet import EfficientCapsNet
from capsbench.models.srcapsnet import SRCapsNet
from capsbench.registry import Registry, close_matches


@dataclass(frozen=True)
class ModelSpec:
    """A registered model: its class, the defaults that define it, and a one-line description."""

    cls: type[Classifier]
    description: str
    defaults: dict[str, Any] = field(default_factory=dict)

    def arguments(self) -> dict[str, Any]:
        """Every keyword argument the model accepts, with the value it gets by default."""
        params = inspect.signature(self.cls.__init__).parameters.values()
        return {p.name: self.defaults.get(p.name, p.default) for p in params if p.kind == p.KEYWORD_ONLY}


MODELS: Registry[ModelSpec] = Registry("model")


def register_model(name: str, spec: ModelSpec) -> None:
    MODELS.register(name)(spec)


register_model("capsnet", ModelSpec(
    CapsNet, "Sabour et al. 2017 CapsNet: conv 256@9x9, 32x8D primary caps, 10x16D class caps, r=3, decoder",
))
register_model("cnn_sabour", ModelSpec(
    ConvNet, "Sabour et al. 2017 baseline CNN: conv 256,256,128 @5x5 (same), FC 328,192, dropout; 35.4 M params",
    {"channels": (256, 256, 128), "kernel_size": 5, "padding": "same", "fc": (328, 192)},
))
register_model("cnn_9x9", ModelSpec(
    ConvNet, "9x9-kernel CNN of CapsNet's size (Gu et al. 2021): conv 256,256,128 @9x9 (valid), FC 328,192; 8.7 M",
    {"channels": (256, 256, 128), "kernel_size": 9, "padding": "valid", "fc": (328, 192)},
))

register_model("cnn_multimnist", ModelSpec(
    PooledConvNet, "Sabour et al. 2017 MultiMNIST baseline: conv 512@9x9, pool, conv 256@5x5, pool, FC 1024; 24.56 M",
))
register_model("capsnet_em", ModelSpec(
    CapsNetEM, "Hinton et al. 2018 matrix capsules, EM routing r=3, coordinate addition, spread loss; small A,B,C,D=64,8,16,16",
))
register_model("effcapsnet", ModelSpec(
    EfficientCapsNet, "Mazzia et al. 2021 Efficient-CapsNet: depthwise primary caps, self-attention routing; 161,824 params + decoder",
))
register_model("srcapsnet", ModelSpec(
    SRCapsNet, "Hahn et al. 2019 self-routing capsules on a small 3-block CNN backbone: 32 types x 16D, one 3x3/2 caps layer",
))
register_model("cnn_avgpool", ModelSpec(
    AvgPoolCNN, "Hahn et al. 2019 AvgPool baseline: srcapsnet's backbone, global average pooling, linear classifier",
))


def check_model_arguments(name: str, overrides: dict[str, Any]) -> None:
    """Raise a CapsbenchError naming the valid arguments if `overrides` has one the model lacks."""
    valid = MODELS.get(name).arguments()
    for key in overrides:
        if key not in valid:
            raise CapsbenchError(
                f"model {name!r} has no argument {key!r}: {close_matches(key, list(valid))}"
            )


def create_model(name: str, **overrides: Any) -> Classifier:
    """Build a registered model with its defaults updated by `overrides`."""
    check_model_arguments(name, overrides)
    spec = MODELS.get(name)
    kwargs = {**spec.defaults, **overrides}
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in kwargs.items()}
    return spec.cls(**kwargs)


def list_models() -> list[str]:
    return MODELS.names()


__all__ = [
    "MODELS", "Classifier", "LogitsAdapter", "ModelOutput", "ModelSpec",
    "check_model_arguments", "create_model", "list_models", "register_model",
]
