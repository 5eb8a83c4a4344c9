"""Overlapping digits (MultiMNIST, Sabour et al. 2017 section 6): both-digits-correct accuracy and segmentation
figures."""

from __future__ import annotations

from typing import Any

import torch
from matplotlib.figure import Figure

from capsbench.data import DATASETS
from capsbench.data.multimnist import PairRecipe, bounding_boxes, box_overlap, pair_labels, render
from capsbench.suites.base import Context, Metric, Suite
from capsbench.suites.layout import Column, Layout, TableSpec
from capsbench.train.evaluation import correct
from capsbench.train.multimnist_protocol import MultiMNISTProtocol, both_correct, digits_found
from capsbench.util.stats import accuracy_fields, error_fields


class OverlapSuite(Suite):
    test_model = "cnn_multimnist"
    description = "MultiMNIST: two overlapping digits; correct only when the top-2 classes are exactly both digits"
    metrics = (
        Metric(
            "both_correct_accuracy", "%", True, "test pairs whose two highest-scoring classes are exactly their digits"
        ),
        Metric("both_correct_error", "%", False, "100 - both_correct_accuracy (the paper's MultiMNIST error)"),
        Metric(
            "per_digit_accuracy", "%", True, "digits of the test pairs that are among the two highest-scoring classes"
        ),
        Metric("single_digit_accuracy", "%", True, "top-1 accuracy on single MNIST test digits centred on the canvas"),
        Metric(
            "box_overlap", "%", None, "mean intersection of the two digits' shifted bounding boxes over the smaller box"
        ),
    )
    layout = Layout(
        (
            TableSpec(
                "overlap",
                "Overlapping digits (MultiMNIST): a pair counts only when its two digits are the two top classes",
                (
                    Column("both_correct_accuracy", "both correct"),
                    Column("both_correct_error", "error"),
                    Column("per_digit_accuracy", "per digit"),
                    Column("single_digit_accuracy", "single digit"),
                    Column("box_overlap", "box overlap"),
                ),
            ),
        )
    )

    def protocol(self, cfg: Any) -> MultiMNISTProtocol:
        p = cfg.params
        return MultiMNISTProtocol(
            max_shift=p.max_shift,
            canvas=p.canvas,
            merge=p.merge,
            num_classes=DATASETS.get(cfg.dataset).num_classes,
            val_pairs_per_digit=p.val_pairs_per_digit,
            val_seed=p.val_seed,
            cache_dir=cfg.cache_dir,
        )

    def measure(self, ctx: Context) -> list[dict[str, Any]]:
        proto, split, p = ctx.protocol, ctx.splits, ctx.params
        recipe = proto.test_recipe(split, pairs_per_digit=p.test_pairs_per_digit, seed=p.test_seed)
        pairs = pair_labels(split.test_y, recipe)  # (N, 2)
        scores = proto.pair_scores(ctx.model, split.test_x, recipe, batch_size=ctx.batch_size, device=ctx.device)
        both = both_correct(scores, pairs).cpu().numpy()
        single = correct(
            ctx.model,
            split.test_x,
            split.test_y,
            batch_size=ctx.batch_size,
            device=ctx.device,
            transform=proto.eval_inputs,
        ).numpy()
        return [
            {"metric": "both_correct_accuracy", **accuracy_fields(both)},
            {"metric": "both_correct_error", **error_fields(both)},
            {"metric": "per_digit_accuracy", **accuracy_fields(digits_found(scores, pairs).cpu().numpy().ravel())},
            {"metric": "single_digit_accuracy", **accuracy_fields(single)},
            {"metric": "box_overlap", "value": 100.0 * box_overlap(bounding_boxes(split.test_x), recipe).mean().item()},
        ]

    def figures(self, ctx: Context) -> dict[str, Figure]:
        if not hasattr(ctx.model, "reconstruct") or ctx.params.figure_pairs < 1:
            return {}
        return {"segmentation": segmentation_figure(ctx)}


@torch.no_grad()
def segmentation_figure(ctx: Context) -> Figure:
    """Top: test pairs. Bottom: the reconstructions from the two most active capsules, red and green, over the input."""
    proto, split = ctx.protocol, ctx.splits
    recipe = proto.test_recipe(split, pairs_per_digit=ctx.params.test_pairs_per_digit, seed=ctx.params.test_seed)
    picks = torch.linspace(0, len(recipe) - 1, min(ctx.params.figure_pairs, len(recipe))).long()
    recipe = PairRecipe(recipe.first[picks], recipe.second[picks], recipe.offsets[picks])
    inputs, _ = render(split.test_x, recipe, canvas=proto.canvas, rule=proto.merge, device=ctx.device)
    out = ctx.model(inputs)
    top2 = out.scores.topk(2, dim=1).indices  # (k, 2), most active first
    recons = [ctx.model.reconstruct(out.poses, top2[:, j]).cpu()[:, 0] for j in range(2)]  # 2 x (k, H, W)
    gray = inputs.cpu()[:, 0]  # (k, H, W)
    overlay = torch.stack([recons[0], recons[1], torch.zeros_like(gray)], dim=-1)  # (k, H, W, 3): red, green
    overlay = (overlay + 0.3 * gray.unsqueeze(-1)).clamp(0, 1)
    labels = pair_labels(split.test_y, recipe)
    fig = Figure(figsize=(1.3 * len(picks), 2.9))
    axes = fig.subplots(2, len(picks), squeeze=False)
    for i in range(len(picks)):
        axes[0][i].imshow(gray[i].numpy(), cmap="gray", vmin=0, vmax=1)
        axes[0][i].set_title(f"L:({labels[i, 0].item()},{labels[i, 1].item()})", fontsize=8)
        axes[1][i].imshow(overlay[i].numpy())
        axes[1][i].set_title(f"R:({top2[i, 0].item()},{top2[i, 1].item()})", fontsize=8)
        for ax in (axes[0][i], axes[1][i]):
            ax.set_axis_off()
    fig.suptitle(f"{ctx.model_name}: L = digits, R = two most active capsules (red, green)", fontsize=8)
    return fig
