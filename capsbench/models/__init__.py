"""Model registry: `create_model(name, **overrides)` and `list_models()`, timm-style.

Importing this package does not import torch: entries name their class as "module:Class", and the accepted
arguments (and their declared ranges, capsbench.models.ranges) are read from the class's source; the class is
imported when a model is built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from capsbench.errors import CapsbenchError
from capsbench.models.ranges import check_arguments
from capsbench.util.lazy import class_literal, keyword_arguments, lazy_attributes, load, split_target
from capsbench.util.registry import Registry, close_matches

if TYPE_CHECKING:
    from capsbench.models.base import Classifier


@dataclass(frozen=True)
class ModelSpec:
    """A registered model: where its class lives ("capsbench.models.capsnet:CapsNet"), the defaults that define
    it, and a one-line description."""

    target: str
    description: str
    defaults: dict[str, Any] = field(default_factory=dict)
    ranges: dict[str, Any] = field(default_factory=dict)  # argument -> range; adds to the class's ARGUMENT_RANGES
    test_args: dict[str, Any] = field(default_factory=dict)  # a tiny model for the generic tests (timm's test sizes)

    def __post_init__(self) -> None:
        if not isinstance(self.target, str):
            raise TypeError(
                f"ModelSpec takes the class as 'package.module:Class' (imported lazily), got {self.target!r}"
            )
        split_target(self.target)

    @property
    def cls(self) -> type[Classifier]:
        """The model class (imports its module, and torch)."""
        return load(self.target)

    def arguments(self) -> dict[str, Any]:
        """Every keyword argument the model accepts, with the value it gets by default (read without torch)."""
        return {name: self.defaults.get(name, default) for name, default in keyword_arguments(self.target).items()}

    def argument_ranges(self) -> dict[str, Any]:
        """The declared range of each constrained argument: the class's ARGUMENT_RANGES (optional), then the entry's."""
        return {**class_literal(self.target, "ARGUMENT_RANGES", {}), **self.ranges}

    def accepted(self) -> list[str] | None:
        """The argument names model_args.<model>.* may set (None: any, for a factory taking **kwargs)."""
        return list(self.arguments())

    def build(self, **kwargs: Any) -> Classifier:
        """The model built with these constructor arguments (imports torch)."""
        return self.cls(**kwargs)


MODELS: Registry[ModelSpec] = Registry("model")


def register_model(name: str, spec: ModelSpec) -> None:
    """Add a model to the registry under `name`; a name already taken is an error."""
    MODELS.register(name)(spec)


register_model(
    "capsnet",
    ModelSpec(
        "capsbench.models.capsnet:CapsNet",
        "Sabour et al. 2017 CapsNet: conv 256@9x9, 32x8D primary caps, 10x16D class caps, r=3, decoder",
        test_args={"conv_channels": 8, "primary_types": 2, "primary_dim": 4, "class_dim": 4, "decoder_hidden": (16,)},
    ),
)
register_model(
    "cnn_sabour",
    ModelSpec(
        "capsbench.models.cnn:ConvNet",
        "Sabour et al. 2017 baseline CNN: conv 256,256,128 @5x5 (same), FC 328,192, dropout; 35.4 M params",
        {"channels": (256, 256, 128), "kernel_size": 5, "padding": "same", "fc": (328, 192)},
        test_args={"channels": (4, 4, 2), "fc": (8, 8)},
    ),
)
register_model(
    "cnn_9x9",
    ModelSpec(
        "capsbench.models.cnn:ConvNet",
        "9x9-kernel CNN of CapsNet's size (Gu et al. 2021): conv 256,256,128 @9x9 (valid), FC 328,192; 8.7 M",
        {"channels": (256, 256, 128), "kernel_size": 9, "padding": "valid", "fc": (328, 192)},
        test_args={"channels": (4, 4, 2), "fc": (8, 8)},
    ),
)

register_model(
    "cnn_multimnist",
    ModelSpec(
        "capsbench.models.cnn_pooled:PooledConvNet",
        "Sabour et al. 2017 MultiMNIST baseline: conv 512@9x9, pool, conv 256@5x5, pool, FC 1024; 24.56 M",
        test_args={"channels": (4, 2), "fc": (8,)},
    ),
)
register_model(
    "cnn_hinton2018",
    ModelSpec(
        "capsbench.models.cnn_hinton2018:SmallNorbCNN",
        "Hinton et al. 2018 smallNORB baseline CNN: conv 32, 64 @5x5, each with 2x2 max pool, FC 1024, dropout; "
        "4.2 M params on 32x32 crops",
        test_args={"channels": (4, 4), "fc": (8,)},
    ),
)
register_model(
    "capsnet_em",
    ModelSpec(
        "capsbench.models.capsnet_em:CapsNetEM",
        "Hinton et al. 2018 matrix capsules, EM routing r=3, coordinate addition, spread loss; small "
        "A,B,C,D=64,8,16,16",
        test_args={"a_channels": 4, "b_types": 2, "c_types": 2, "d_types": 2},
    ),
)
register_model(
    "effcapsnet",
    ModelSpec(
        "capsbench.models.effcapsnet:EfficientCapsNet",
        "Mazzia et al. 2021 Efficient-CapsNet: depthwise primary caps, self-attention routing; 161,824 params + "
        "decoder",
        test_args={"channels": (4, 4, 4, 8), "primary_caps": 2, "primary_dim": 4, "class_dim": 4,
                   "decoder_hidden": (16,)},
    ),
)
register_model(
    "srcapsnet",
    ModelSpec(
        "capsbench.models.srcapsnet:SRCapsNet",
        "Hahn et al. 2019 self-routing capsules on a small 3-block CNN (or backbone=resnet20): 32 types x 16D, "
        "one 3x3/2 caps layer",
        test_args={"backbone_channels": (4, 4, 4), "caps_types": 2, "caps_dim": 4},
    ),
)
register_model(
    "cnn_avgpool",
    ModelSpec(
        "capsbench.models.backbone:AvgPoolCNN",
        "Hahn et al. 2019 AvgPool baseline: srcapsnet's backbone, global average pooling, linear classifier",
        test_args={"backbone_channels": (4, 4, 4)},
    ),
)

for _depth, _n, _size in ((20, 3, "0.27"), (56, 9, "0.85"), (110, 18, "1.7")):
    register_model(
        f"resnet{_depth}",
        ModelSpec(
            "capsbench.models.resnet:CifarResNet",
            f"He et al. 2016 CIFAR ResNet-{_depth}: 6n+2 layers (n={_n}), 16/32/64 filters, option-A shortcuts, "
            f"global average pooling; {_size} M params",
            {"blocks": _n},
            test_args={"blocks": 1, "width": 4},
        ),
    )


def check_model_arguments(name: str, overrides: dict[str, Any]) -> None:
    """Raise a CapsbenchError naming the valid arguments if `overrides` has one the model lacks (any name passes for
    an external factory taking **kwargs), or the declared range of an argument whose value lies outside it."""
    spec = MODELS.get(name)
    valid = spec.accepted()
    for key in overrides:
        if valid is not None and key not in valid:
            raise CapsbenchError(f"model {name!r} has no argument {key!r}: {close_matches(key, list(valid))}")
    check_arguments(f"model_args.{name}", overrides, spec.argument_ranges())


def create_model(name: str, **overrides: Any) -> Classifier:
    """Build a registered model with its defaults updated by `overrides`."""
    check_model_arguments(name, overrides)
    spec = MODELS.get(name)
    kwargs = {**spec.defaults, **overrides}
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in kwargs.items()}
    return spec.build(**kwargs)


def list_models() -> list[str]:
    """The registered model names, sorted."""
    return MODELS.names()


_LAZY = {
    "Classifier": "capsbench.models.base:Classifier",
    "LogitsAdapter": "capsbench.models.base:LogitsAdapter",
    "ModelOutput": "capsbench.models.base:ModelOutput",
}

__getattr__ = lazy_attributes(__name__, _LAZY)  # the model base classes, imported with torch on first use


__all__ = [
    "MODELS",
    "Classifier",
    "LogitsAdapter",
    "ModelOutput",
    "ModelSpec",
    "check_model_arguments",
    "create_model",
    "list_models",
    "register_model",
]
