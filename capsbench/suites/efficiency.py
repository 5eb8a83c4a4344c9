"""What each model costs at the budget's size: parameters, MACs, peak memory, latency, throughput, and
latency per routing iteration. Trains nothing: every number is independent of the weights."""

from __future__ import annotations

import logging
from typing import Any

import torch

from capsbench.cost.macs import PARTS, count_macs, parameter_counts
from capsbench.cost.memory import StepSpec, cpu_peak_rss, cuda_peak_bytes
from capsbench.cost.timing import TIMING, how_timed, median_seconds, routing_inputs, routing_modules, time_iterations
from capsbench.suites.base import Context, Metric, Suite
from capsbench.suites.layout import Column, Group, Layout, SweepColumns, TableSpec
from capsbench.suites.params import EfficiencyParams
from capsbench.util.precision import autocast, maybe_compile
from capsbench.util.progress import Progress

log = logging.getLogger(__name__)
MIB = 2**20
LAYOUT = Layout(
    (
        TableSpec(
            "cost",
            "Cost per model at the budget's size",
            (
                Column("params", "params", {"part": "total"}),
                Column("macs", "MACs", {"part": "total"}, "per image"),
                Column("latency", "latency", {"batch": 1}, "batch 1"),
                Column("throughput", "throughput", detail="large batch"),
            ),
            describe=TIMING,
            notes=("FLOPs = 2 x MACs; MACs count conv, linear and matmul multiply-accumulates",),
        ),
        TableSpec(
            "parts",
            "Parameters and MACs per part (encoder, routing weights, decoder)",
            (
                SweepColumns("params", "part", "params ({unit})", compare=False),
                SweepColumns("macs", "part", "MACs per image ({unit})", compare=False),
                SweepColumns("elementwise_ops", "part", "elementwise ops per image ({unit})", compare=False),
            ),
        ),
        TableSpec(
            "memory",
            "Peak memory of one step",
            (
                SweepColumns("peak_memory", "batch", "inference peak ({unit}) at batch", {"mode": "infer"}),
                SweepColumns("peak_memory", "batch", "training peak ({unit}) at batch", {"mode": "train"}),
                SweepColumns("step_memory", "batch", "training step ({unit}) at batch", {"mode": "train"}),
            ),
            describe=("method", *TIMING),
        ),
        TableSpec(
            "routing",
            "Routing module time against routing iterations r",
            (SweepColumns("routing_latency", "r", "routing time ({unit}) at r"),),
            blocks=Group("batch"),
            describe=TIMING,
        ),
        TableSpec(
            "routing_iteration",
            "Time per routing iteration",
            (SweepColumns("routing_iteration_latency", "batch", "time per iteration ({unit}) at batch"),),
            blocks=Group("method"),
            describe=TIMING,
        ),
        TableSpec(
            "counting",
            "How the MACs were counted: the cross-check and the ops no counter handles",
            (
                Column("macs", "MACs", {"part": "total"}, "fvcore + handles", compare=False),
                Column("flopcounter_macs", "MACs", detail="FlopCounterMode", compare=False),
                SweepColumns("uncounted_op_calls", "op", "uncounted ({unit}) by op"),
            ),
        ),
        TableSpec(
            "modules",
            "MACs per top-level module",
            (Column("module_macs", "MACs", detail="per image", compare=False),),
            rows=("module",),
        ),
    )
)


class EfficiencySuite(Suite):
    description = "params, MACs (FLOPs = 2 MACs), peak memory, latency, throughput, latency per routing iteration"
    needs_training = False
    sweep_columns = ("part", "module", "op", "mode", "batch", "r", "method", *TIMING)
    metrics = (
        Metric("params", "M", False, "parameters, total and per part (encoder, routing weights, decoder)", exact=True),
        Metric(
            "macs", "M MACs", False, "multiply-accumulates of conv/linear/matmul ops per image, per part", exact=True
        ),
        Metric("flops", "M FLOPs", False, "2 x MACs per image", exact=True),
        Metric(
            "elementwise_ops",
            "M ops",
            False,
            "softmax, squash, norms, activations per image (one per element)",
            exact=True,
        ),
        Metric(
            "flopcounter_macs", "M MACs", False, "cross-check: torch FlopCounterMode FLOPs / 2 per image", exact=True
        ),
        Metric("module_macs", "M MACs", False, "MACs per top-level module", exact=True),
        Metric("uncounted_op_calls", "calls", None, "ops no counter handles (listed, not hidden)"),
        Metric("peak_memory", "MiB", False, "peak memory of one step (CUDA max allocated, or process peak RSS on CPU)"),
        Metric("step_memory", "MiB", False, "CPU: how far the step raised RSS above the built model"),
        Metric("latency", "ms", False, "median forward time at batch 1 (eval, no grad)"),
        Metric("throughput", "img/s", True, "large batch / median forward time"),
        Metric("routing_latency", "ms", False, "median time of the routing module at r iterations"),
        Metric("routing_iteration_latency", "ms", False, "time per routing iteration (method column says how)"),
    )
    layout = LAYOUT

    def measure(self, ctx: Context) -> list[dict[str, Any]]:
        p: EfficiencyParams = ctx.params
        spec = ctx.splits.spec
        side = ctx.protocol.input_size(spec.image_size)
        shape = (spec.in_channels, side, side)
        timing = how_timed(ctx.device, p.precision)  # on every measured record
        timed = ([("peak memory", self._memory)] if p.memory else []) + [
            ("latency", self._latency),
            ("routing latency", self._routing),
        ]
        with Progress(f"efficiency {ctx.model_name}", 1 + len(timed), unit="probe") as bar:
            bar.note("counting MACs")
            records = self._counts(ctx.model, shape)
            bar.update()
            for stage, probe in timed:
                bar.note(stage)
                records += [{**r, **timing} for r in probe(ctx, shape)]
                bar.update()
        return records

    @staticmethod
    def _counts(model: torch.nn.Module, shape: tuple[int, int, int]) -> list[dict[str, Any]]:
        report = count_macs(model, shape)
        params = parameter_counts(model)
        # Parts the model has: a CNN has no routing or decoder part.
        parts = [p for p in PARTS if params[p] or report.macs[p] or report.elementwise[p]]
        rows: list[dict[str, Any]] = [
            {"metric": "params", "value": params[p] / 1e6, "part": p} for p in [*parts, "total"]
        ]
        for part in parts:
            rows.append({"metric": "macs", "value": report.macs[part] / 1e6, "part": part})
            rows.append({"metric": "elementwise_ops", "value": report.elementwise[part] / 1e6, "part": part})
        total = report.total_macs
        rows += [
            {"metric": "macs", "value": total / 1e6, "part": "total"},
            {"metric": "flops", "value": 2 * total / 1e6, "part": "total"},
            {"metric": "flopcounter_macs", "value": report.flop_counter_macs / 1e6, "part": "total"},
        ]
        rows += [{"metric": "module_macs", "value": v / 1e6, "module": m} for m, v in report.by_module.items()]
        rows += [{"metric": "uncounted_op_calls", "value": float(n), "op": op} for op, n in report.uncounted.items()]
        return rows

    @staticmethod
    def _memory(ctx: Context, shape: tuple[int, int, int]) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for mode in ("infer", "train"):
            for batch in (1, ctx.params.large_batch):
                spec = StepSpec(ctx.model_name, ctx.model_args, shape, batch, mode, ctx.params.precision, ctx.seed)
                cols = {"mode": mode, "batch": batch}
                if ctx.device.startswith("cuda"):
                    peak = cuda_peak_bytes(ctx.model, spec, ctx.device)
                    rows.append({"metric": "peak_memory", "value": peak / MIB, "method": "cuda max allocated", **cols})
                else:
                    rss = cpu_peak_rss(spec)
                    rows.append(
                        {"metric": "peak_memory", "value": rss.peak / MIB, "method": "peak RSS, fresh process", **cols}
                    )
                    rows.append(
                        {"metric": "step_memory", "value": rss.step / MIB, "method": "peak RSS, fresh process", **cols}
                    )
        ctx.model.zero_grad(set_to_none=True)
        return rows

    @staticmethod
    def _latency(ctx: Context, shape: tuple[int, int, int]) -> list[dict[str, Any]]:
        p: EfficiencyParams = ctx.params
        model = maybe_compile(ctx.model.eval(), p.compile)
        rows: list[dict[str, Any]] = []
        for batch in (1, p.large_batch):
            x = torch.rand(batch, *shape, device=ctx.device)

            def forward() -> None:
                with torch.no_grad(), autocast(ctx.device, p.precision):
                    model(x)

            seconds = median_seconds(forward, device=ctx.device, warmup=p.warmup, repeats=p.repeats)
            if batch == 1:
                rows.append({"metric": "latency", "value": 1e3 * seconds, "batch": 1})
            else:
                rows.append({"metric": "throughput", "value": batch / seconds, "batch": batch})
        return rows

    @staticmethod
    def _routing(ctx: Context, shape: tuple[int, int, int]) -> list[dict[str, Any]]:
        p: EfficiencyParams = ctx.params
        rows: list[dict[str, Any]] = []
        for _name, module in routing_modules(ctx.model):
            for batch in (1, p.large_batch):
                x = torch.rand(batch, *shape, device=ctx.device)
                with autocast(ctx.device, p.precision):
                    inputs = routing_inputs(ctx.model, module, x)
                    timing = time_iterations(
                        module,
                        inputs,
                        max_iterations=p.routing_max_iterations,
                        device=ctx.device,
                        warmup=p.warmup,
                        repeats=p.repeats,
                    )
                for r, seconds in timing.seconds.items():
                    rows.append({"metric": "routing_latency", "value": 1e3 * seconds, "batch": batch, "r": r})
                method = f"slope of median time over r=1..{p.routing_max_iterations}"
                rows.append(
                    {
                        "metric": "routing_iteration_latency",
                        "value": 1e3 * timing.slope,
                        "batch": batch,
                        "method": method,
                    }
                )
                if timing.events is not None:
                    rows.append(
                        {
                            "metric": "routing_iteration_latency",
                            "value": 1e3 * timing.events,
                            "batch": batch,
                            "method": f"CUDA events between iterations at r={p.routing_max_iterations}",
                        }
                    )
        return rows
