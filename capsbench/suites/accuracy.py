"""Clean test accuracy and error of each trained model."""

from __future__ import annotations

from typing import Any

from capsbench.evaluation import accuracy
from capsbench.suites.base import Context, Metric, Suite


class AccuracySuite(Suite):
    name = "accuracy"
    description = "clean test accuracy / error % of each model (checkpoint chosen on the validation split)"
    metrics = (
        Metric("test_accuracy", "%", True, "top-1 accuracy on the test split"),
        Metric("test_error", "%", False, "100 - test_accuracy"),
    )

    def measure(self, ctx: Context) -> list[dict[str, Any]]:
        acc = 100.0 * accuracy(ctx.model, ctx.splits.test_x, ctx.splits.test_y, batch_size=ctx.batch_size, device=ctx.device)
        return [{"metric": "test_accuracy", "value": acc}, {"metric": "test_error", "value": 100.0 - acc}]
