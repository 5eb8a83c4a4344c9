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
        split = ctx.splits
        acc = 100.0 * accuracy(
            ctx.model, split.test_x, split.test_y, batch_size=ctx.batch_size, device=ctx.device,
            transform=ctx.protocol.eval_inputs,
        )
        return [{"metric": "test_accuracy", "value": acc}, {"metric": "test_error", "value": 100.0 - acc}]
