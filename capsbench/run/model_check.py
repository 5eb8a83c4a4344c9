"""The model contract, checked on a real batch (`capsbench check-model`, and the structural part before every run with
an external model or external weights): output shapes and finite values, scores and logits ranking classes alike,
inputs in [0, 1] with any normalisation inside the model, determinism in eval mode, finite non-zero input gradients,
capsule hooks that agree with the model's own predictions; and what the model costs."""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch.nn import functional as F

from capsbench.errors import CapsbenchError
from capsbench.models import Classifier
from capsbench.models.adapter import code_class, code_module, output_problem, reaches_straight_through
from capsbench.models.base import NotApplicable
from capsbench.models.failures import defined_at, user_code, where_failed

RANGE_GAP = 0.2  # accuracy another input scaling must beat [0, 1] pixels by for the range check to fail
SCALINGS = ("standardised (x - mean) / std", "0..255")
CUT = ("its logits do not depend on the input differentiably: something in the forward pass cuts the graph "
       "(.detach(), argmax, .item(), integer casts)")


@dataclass(frozen=True)
class Finding:
    """One check: passed (True), failed (False: `text` says what to change) or information (None)."""

    check: str
    ok: bool | None
    text: str


def forward(model: Classifier, images: torch.Tensor, name: str):
    """The model's output in eval mode without gradients; a failing forward pass is one CapsbenchError."""
    model.eval()
    try:
        with torch.no_grad(), user_code():
            return model(images)
    except CapsbenchError:
        raise
    except Exception as exc:  # the user's forward pass raised, with any exception: report where, in one line
        where = where_failed(exc, code_module(model))
        raise CapsbenchError(f"model {name!r}: its forward pass raised {where}") from None


def output_findings(model: Classifier, images: torch.Tensor, num_classes: int, name: str) -> list[Finding]:
    """Outputs on the inputs' device and floating point (else only that finding: nothing else can be read of them),
    shapes, finite values and agreement of scores and logits on `images` (B, C, H, W) in [0, 1]."""
    out, b = forward(model, images, name), len(images)
    problem = output_problem({f.name: getattr(out, f.name) for f in fields(out)}, images.device)
    if problem is not None:
        return [Finding("outputs on the inputs' device, floating point", False,
                        problem + defined_at(code_class(model).forward))]
    found = []
    for field in ("scores", "logits"):
        shape = tuple(getattr(out, field).shape)
        found.append(Finding(f"{field} shape", shape == (b, num_classes),
                             f"{field} have shape {shape} for {b} images; expected ({b}, {num_classes}): build it for "
                             f"{num_classes} classes (model_args.{name}.num_classes, or its own argument)"))
    bad = [f for f in ("scores", "logits", "pre_squash", "reconstructions")
           if getattr(out, f) is not None and not torch.isfinite(getattr(out, f)).all()]
    found.append(Finding("finite outputs", not bad, f"it returned NaN or inf in {', '.join(bad)} on real test images: "
                                                    "check its weights and its forward pass (divisions, square roots)"))
    if found[0].ok and found[1].ok:
        differ = int((out.scores.argmax(1) != out.logits.argmax(1)).sum())
        found.append(Finding("argmax scores = argmax logits", differ == 0,
                             f"the argmax of the scores and of the logits differ on {differ} of {b} images: the "
                             "logits must rank the classes as the scores do"))
    if out.reconstructions is not None:
        shape = tuple(out.reconstructions.shape)
        found.append(Finding("reconstructions shape", shape == tuple(images.shape),
                             f"reconstructions have shape {shape}; expected the inputs' {tuple(images.shape)}"))
    return found


def input_range_finding(model: Classifier, images: torch.Tensor, labels: torch.Tensor, name: str) -> Finding:
    """Trained weights read [0, 1] pixels: no other scaling of the same images is classified much better."""
    mean, std = images.mean(), images.std()
    accuracy = {
        "[0, 1]": _accuracy(model, images, labels, name),
        SCALINGS[0]: _accuracy(model, (images - mean) / std, labels, name),
        SCALINGS[1]: _accuracy(model, images * 255.0, labels, name),
    }
    best = max(SCALINGS, key=lambda k: accuracy[k])
    seen = ", ".join(f"{k}: {100 * v:.1f} %" for k, v in accuracy.items())
    if accuracy[best] >= accuracy["[0, 1]"] + RANGE_GAP:
        return Finding("inputs in [0, 1]", False, f"accuracy on {len(labels)} test images {seen}: it expects "
                       f"{best} inputs; move that normalisation into its forward pass (capsbench feeds [0, 1] pixels)")
    return Finding("inputs in [0, 1]", True, f"accuracy on {len(labels)} test images {seen}")


def determinism_finding(model: Classifier, images: torch.Tensor, name: str) -> Finding:
    """Two eval-mode passes on the same images give the same logits, bit for bit."""
    first, second = forward(model, images, name).logits, forward(model, images, name).logits
    gap = float((first - second).abs().max()) if first.shape == second.shape else float("inf")
    return Finding("deterministic in eval mode", torch.equal(first, second),
                   f"two eval-mode passes on the same images differ (max |logit difference| {gap:.3g}): make eval() "
                   "deterministic (no dropout, sampling or random routing initialisation in eval mode)")


def gradient_finding(model: Classifier, images: torch.Tensor, labels: torch.Tensor) -> Finding:
    """Cross-entropy on the attack logits reaches the pixels with finite, non-zero gradients."""
    x = images.detach().clone().requires_grad_(True)
    model.eval()
    loss = F.cross_entropy(model(x).logits, labels)
    if not loss.requires_grad:
        return Finding("input gradients", False, CUT)
    (grad,) = torch.autograd.grad(loss, x, allow_unused=True)
    if grad is None:
        return Finding("input gradients", False, CUT)
    if not torch.isfinite(grad).all():
        return Finding("input gradients", False, "input gradients contain NaN or inf: guard divisions and square "
                       "roots in the forward pass (e.g. sqrt(|s|^2 + eps) in the squash)")
    return Finding("input gradients", bool(grad.abs().sum() > 0), "input gradients are all zero: something in the "
                   "forward pass cuts the graph (.detach(), argmax, .item(), integer casts); attacks need gradients")


def hook_findings(model: Classifier, images: torch.Tensor, name: str) -> list[Finding]:
    """The capsule hooks: pre_squash norms ordered as the lengths, vote_logits shaped as the logits, and which
    adaptive attacks will run."""
    out, found = forward(model, images, name), []
    if out.pre_squash is not None:
        norms = out.pre_squash.norm(dim=-1)
        same = norms.shape == out.scores.shape and torch.equal(norms.argsort(dim=1, stable=True),
                                                               out.scores.argsort(dim=1, stable=True))
        found.append(Finding("pre_squash agrees with the lengths", same, "the pre_squash norms order the classes "
                             "differently from the lengths: pre_squash must be the class capsules whose squash gives "
                             "the lengths the model returns"))
    try:
        with torch.no_grad():
            votes = model.vote_logits(images)
        found.append(Finding("vote_logits", tuple(votes.shape) == tuple(out.logits.shape)
                             and bool(torch.isfinite(votes).all()), f"vote_logits(x) returned shape "
                             f"{tuple(votes.shape)}; expected finite logits of the logits' {tuple(out.logits.shape)}"))
    except NotApplicable as exc:
        found.append(Finding("vote_logits", None, f"the Vote attack will not run: {exc}"))
    if model.is_capsule:
        reason = model.missing_adaptive_hooks(images[:1])
        straight = reaches_straight_through(model, images[:1])
        found.append(Finding("adaptive attacks", None, f"pgd_adaptive will not run: {reason}" if reason else
                             f"pgd_adaptive runs ({'pre_squash' if out.pre_squash is not None else 'no pre_squash'}"
                             f", straight-through switch {'reaches' if straight else 'reaches no'} squash)"))
    else:
        found.append(Finding("adaptive attacks", None, "not a capsule model: pgd_adaptive and vote do not apply"))
    return found


def _accuracy(model: Classifier, images: torch.Tensor, labels: torch.Tensor, name: str) -> float:
    return float((forward(model, images, name).scores.argmax(1) == labels).float().mean())
