"""Clean test accuracy and error of each trained model."""

from __future__ import annotations

from typing import Any

from capsbench.suites.base import Context, Metric, Suite
from capsbench.suites.layout import Column, Layout, TableSpec
from capsbench.train.evaluation import correct
from capsbench.util.stats import accuracy_fields, error_fields


class AccuracySuite(Suite):
    description = "clean test accuracy / error % of each model (checkpoint chosen on the validation split)"
    metrics = (
        Metric("test_accuracy", "%", True, "top-1 accuracy on the test split"),
        Metric("test_error", "%", False, "100 - test_accuracy"),
    )
    layout = Layout((TableSpec("accuracy", "Clean test accuracy and error",
                               (Column("test_accuracy", "accuracy"), Column("test_error", "error"))),))

    def measure(self, ctx: Context) -> list[dict[str, Any]]:
        return accuracy_records(ctx)


def accuracy_records(ctx: Context) -> list[dict[str, Any]]:
    """test_accuracy and test_error of the model on the test split, with n, Wilson interval and per-image outcomes."""
    split = ctx.splits
    ok = correct(ctx.model, split.test_x, split.test_y, batch_size=ctx.batch_size, device=ctx.device,
                 transform=ctx.protocol.eval_inputs).numpy()
    return [{"metric": "test_accuracy", **accuracy_fields(ok)}, {"metric": "test_error", **error_fields(ok)}]
