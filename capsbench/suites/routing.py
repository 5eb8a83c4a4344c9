"""What routing iterations buy: CapsNet trained at r = 1..N, test accuracy and latency against r
(the shape of Table 1 of Sabour et al., arXiv:1710.09829, plus timing)."""

from __future__ import annotations

from typing import Any

import torch

from capsbench.cost.timing import TIMING, how_timed, median_seconds
from capsbench.models import MODELS
from capsbench.suites.accuracy import accuracy_records
from capsbench.suites.base import Context, Metric, Suite, Variant
from capsbench.suites.layout import Column, Layout, SweepPlot, TableSpec
from capsbench.suites.params import RoutingParams
from capsbench.util.precision import autocast, maybe_compile


class RoutingSuite(Suite):
    test_model = "capsnet"
    description = "CapsNet trained at r = 1..5 routing iterations: test accuracy and latency against r"
    sweep_columns = ("r", *TIMING)
    metrics = (
        Metric("test_accuracy", "%", True, "top-1 test accuracy of the variant trained at r iterations"),
        Metric("test_error", "%", False, "100 - test_accuracy"),
        Metric("latency", "ms", False, "median forward time at batch 1 (eval, no grad)"),
        Metric("throughput", "img/s", True, "large batch / median forward time"),
    )
    layout = Layout(
        tables=(
            TableSpec(
                "routing",
                "Routing iterations r: test accuracy and cost",
                (
                    Column("test_accuracy", "accuracy"),
                    Column("test_error", "error"),
                    Column("latency", "latency", detail="batch 1"),
                    Column("throughput", "throughput", detail="large batch"),
                ),
                rows=("r",),
                describe=TIMING,  # how the timings were taken, under the table
            ),
        ),
        figures=(
            SweepPlot(
                "routing_ablation",
                ("test_accuracy", "latency"),
                "r",
                xlabel="routing iterations r",
                ylabels=("test accuracy (%)", "latency (ms)"),
            ),
        ),
    )

    def variants(self, cfg: Any, model_name: str) -> list[Variant]:
        if "routing_iterations" not in MODELS.get(model_name).arguments():
            return [Variant()]  # a model without routing is measured once, as a reference row
        return [Variant(model_args={"routing_iterations": r}, columns={"r": r}) for r in cfg.params.iterations]

    def measure(self, ctx: Context) -> list[dict[str, Any]]:
        p: RoutingParams = ctx.params
        split = ctx.splits
        records = accuracy_records(ctx)
        model = maybe_compile(ctx.model.eval(), p.compile)
        side = ctx.protocol.input_size(split.spec.image_size)
        timing = how_timed(ctx.device, p.precision)
        for batch in (1, p.large_batch):
            x = torch.rand(batch, split.spec.in_channels, side, side, device=ctx.device)

            def forward() -> None:
                with torch.no_grad(), autocast(ctx.device, p.precision):
                    model(x)

            seconds = median_seconds(forward, device=ctx.device, warmup=p.warmup, repeats=p.repeats)
            if batch == 1:
                records.append({"metric": "latency", "value": 1e3 * seconds, **timing})
            else:
                records.append({"metric": "throughput", "value": batch / seconds, **timing})
        return records
