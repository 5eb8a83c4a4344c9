"""The adapter that puts an external model under capsbench's output contract (ModelOutput), so that every suite and
attack treats it like a built-in one.

What the model returns, and how it is read:
- a ModelOutput: as it is;
- a (B, C) tensor: logits (scores = softmax), unless the class declares `capsbench_outputs = "lengths"` (capsule
  lengths: scores = lengths, attack logits = log-normalised lengths) or `"poses"` ((B, C, D) class capsules);
- a tuple: its entries named in order by `capsbench_outputs = ("lengths", "reconstructions")` (None skips an entry);
- a dict: its keys among logits, lengths, poses, pre_squash, reconstructions (others are ignored), or renamed by
  `capsbench_outputs = {"caps": "poses", ...}`.
Capsule hooks: `pre_squash` (B, C, D) class capsules before their squash, a `vote_logits(x)` method (Gu et al. 2021's
vote surrogate), squashes wrapped in capsbench.layers.straight_through.saturating, `reconstructions` (detection).
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from capsbench.errors import CapsbenchError
from capsbench.layers.capsules import capsule_logits, margin_loss, reconstruction_loss
from capsbench.layers.straight_through import straight_through
from capsbench.models.base import Classifier, ModelOutput, NotApplicable, multi_hot_loss
from capsbench.models.failures import defined_at, user_code

DECLARATION = "capsbench_outputs"
OUTPUTS = ("logits", "lengths", "poses", "pre_squash", "reconstructions")
RECON_WEIGHT = 0.0005  # Sabour et al.'s weight of the sum-squared reconstruction error, when capsbench trains it


def adapt(module: Any, *, name: str, input_shape: tuple[int, int, int], num_classes: int) -> Classifier:
    """A Classifier as it is; any other nn.Module wrapped in ExternalModel."""
    if isinstance(module, Classifier):
        return module
    if not isinstance(module, nn.Module):
        raise CapsbenchError(
            f"model {name!r}: its class or factory returned a {type(module).__name__}, not a torch.nn.Module"
        )
    return ExternalModel(module, name=name, input_shape=input_shape, num_classes=num_classes)


def named_outputs(raw: Any, declared: Any, name: str) -> dict[str, torch.Tensor]:
    """The model's raw output as {output name: tensor}, read by the rules in the module docstring."""
    if isinstance(raw, torch.Tensor):
        kind = declared if isinstance(declared, str) else "logits"
        if declared is not None and not isinstance(declared, str):
            raise CapsbenchError(f"model {name!r} returns one tensor, but {DECLARATION} = {declared!r} names several")
        parts = {kind: raw}
    elif isinstance(raw, (tuple, list)):
        if not isinstance(declared, (tuple, list)) or len(declared) != len(raw):
            raise CapsbenchError(
                f"model {name!r} returns a tuple of {len(raw)}: name its entries on the class, e.g. "
                f"{DECLARATION} = {('lengths', 'reconstructions', None)[:len(raw)]!r} (None skips an entry)"
            )
        parts = {k: v for k, v in zip(declared, raw) if k is not None}
    elif isinstance(raw, dict):
        renames = declared if isinstance(declared, dict) else {}
        parts = {renames.get(k, k): v for k, v in raw.items() if renames.get(k, k) in OUTPUTS}
    else:
        raise CapsbenchError(
            f"model {name!r} returned a {type(raw).__name__}: expected a ModelOutput, a (B, C) tensor of logits, "
            "a tuple or a dict (see capsbench.models.adapter)"
        )
    unknown = [k for k in parts if k not in OUTPUTS]
    if unknown:
        raise CapsbenchError(
            f"model {name!r}: {DECLARATION} names {unknown[0]!r}; the outputs are {', '.join(OUTPUTS)}"
        )
    if not {"logits", "lengths", "poses"} & set(parts):
        raise CapsbenchError(
            f"model {name!r} returned {', '.join(parts) or 'nothing usable'}: it needs logits, lengths or poses"
        )
    return parts


def output_problem(parts: dict[str, Any], device: torch.device) -> str | None:
    """What keeps a model's outputs (`parts`, by name; None: absent) from being used with inputs on `device`: an output
    that is no tensor, lies on another device or is not floating point; None when nothing."""
    for key, value in parts.items():
        if value is None:
            continue
        if not isinstance(value, torch.Tensor):
            return f"its forward pass returned {key} as a {type(value).__name__}, not a tensor"
        if value.device != device:
            return (f"its forward pass returned {key} on device {value.device} for inputs on {device}: return every "
                    "output on the inputs' device (x.device), with no .to(...), .cpu() or .cuda() at the end")
        if not value.is_floating_point():
            return (f"its forward pass returned {key} of dtype {value.dtype}: return floating-point outputs (the "
                    "inputs' dtype), which the losses and attacks differentiate")
    return None


def code_class(model: nn.Module) -> type:
    """The class of the code that defines `model`: an external model's own, not this adapter's."""
    return type(model.module if isinstance(model, ExternalModel) else model)


def model_output(parts: dict[str, torch.Tensor]) -> ModelOutput:
    """ModelOutput from named outputs: capsule lengths (given, or the norms of the poses) are the scores and their
    log-normalised values the attack logits; else logits and their softmax."""
    lengths = parts.get("lengths")
    if lengths is None and "poses" in parts:
        lengths = parts["poses"].norm(dim=-1)  # (B, C, D) -> (B, C)
    if lengths is not None:
        logits = parts.get("logits", capsule_logits(lengths))
        scores = lengths
    else:
        logits = parts["logits"]
        scores = torch.softmax(logits, dim=1)
    return ModelOutput(scores=scores, logits=logits, poses=parts.get("poses"),
                       reconstructions=parts.get("reconstructions"), pre_squash=parts.get("pre_squash"))


def code_module(model: nn.Module) -> str:
    """The module of the code that defines `model`: an external model's own, not this adapter's."""
    return code_class(model).__module__


class ExternalModel(Classifier):
    """An external nn.Module seen as a Classifier: its output read into a ModelOutput, its hooks offered to the attacks.
    It trains (when capsbench trains it) with margin loss (+ 0.0005 x sum-squared reconstruction error when it
    returns reconstructions) if it is a capsule model, else with cross-entropy. Weights are the module's own
    (`.module`), so a state dict saved from the plain module loads into it."""

    def __init__(self, module: nn.Module, *, name: str, input_shape: tuple[int, int, int], num_classes: int) -> None:
        super().__init__()
        self.module = module
        self.name, self.input_shape, self.num_classes = name, tuple(input_shape), num_classes
        self._takes_labels = "labels" in inspect.signature(module.forward).parameters
        self._capsule: bool | None = None  # known after the first forward pass

    @property
    def is_capsule(self) -> bool:  # type: ignore[override]
        """Whether its scores are capsule lengths (known from the declaration, else from one probe forward)."""
        if self._capsule is None:
            with torch.no_grad():
                self(torch.zeros(1, *self.input_shape, device=self._device()))
        return bool(self._capsule)

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> ModelOutput:
        with user_code():
            raw = self.module(x, labels=labels) if self._takes_labels and labels is not None else self.module(x)
        if isinstance(raw, ModelOutput):
            self._capsule = raw.poses is not None or raw.pre_squash is not None
            return raw
        parts = named_outputs(raw, getattr(self.module, DECLARATION, None), self.name)
        if (problem := output_problem(parts, x.device)) is not None:
            raise CapsbenchError(f"model {self.name!r}: {problem}{defined_at(type(self.module).forward)}")
        self._capsule = bool({"lengths", "poses"} & set(parts))
        return model_output(parts)

    def loss(self, out: ModelOutput, labels: torch.Tensor, images: torch.Tensor, **_components: Any) -> torch.Tensor:
        if not self.is_capsule:
            return multi_hot_loss(out.logits, labels) if labels.dim() == 2 else F.cross_entropy(out.logits, labels)
        loss = margin_loss(out.scores, labels)
        if out.reconstructions is not None and labels.dim() == 1:
            loss = loss + RECON_WEIGHT * reconstruction_loss(out.reconstructions, images)
        return loss

    def vote_logits(self, x: torch.Tensor) -> torch.Tensor:
        hook = getattr(self.module, "vote_logits", None)
        if not callable(hook) and not self.is_capsule:
            raise NotApplicable(f"{self.name} is not a capsule model: it has no capsule votes to average")
        if not callable(hook):
            raise NotApplicable(
                f"{self.name} exposes no vote_logits(x) hook (the votes averaged with uniform coupling, Gu et al. "
                "2021), so the Vote attack cannot run on it and its worst case is not adaptive"
            )
        with user_code():
            return hook(x)

    def missing_adaptive_hooks(self, sample: torch.Tensor) -> str | None:
        if self(sample).pre_squash is not None or reaches_straight_through(self, sample):
            return None
        return (
            f"{self.name} exposes no pre_squash class capsules and no squash that the straight-through switch reaches "
            "(capsbench.layers.straight_through.saturating), so this would repeat pgd and its worst case is not "
            "adaptive"
        )

    def _device(self) -> torch.device:
        tensor = next(iter([*self.module.parameters(), *self.module.buffers()]), None)
        return tensor.device if tensor is not None else torch.device("cpu")


def reaches_straight_through(model: Classifier, sample: torch.Tensor) -> bool:
    """Whether the straight-through switch changes the model's input gradient on `sample`, i.e. some squash of the
    model goes through capsbench.layers.straight_through.saturating."""
    grads = []
    for active in (False, True):
        x = sample.detach().clone().requires_grad_(True)
        with straight_through(active):
            out = model(x)
        (grad,) = torch.autograd.grad(F.cross_entropy(out.logits, out.scores.detach().argmax(dim=1)), x)
        grads.append(grad)
    return not torch.equal(grads[0], grads[1])
