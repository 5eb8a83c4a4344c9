"""The `capsbench` command line (Typer): parsing and printing only; the work happens in the library."""

from __future__ import annotations

import logging
import sys
from typing import Annotated, Optional

import typer

from capsbench.errors import CapsbenchError

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Benchmark capsule networks against CNN baselines under one protocol.\n\n"
    "Examples:\n\n"
    "  capsbench run suite=accuracy\n\n"
    "  capsbench run suite=accuracy budget=smoke seeds=[0,1]\n\n"
    "  capsbench report\n\n"
    "  capsbench list models",
)

Overrides = Annotated[Optional[list[str]], typer.Argument(help="key=value settings, e.g. suite=accuracy seeds=[0,1,2]", show_default=False)]


def _fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _setup_logging() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S", stream=sys.stderr)


@app.command(help="Run a suite: train or reuse checkpoints, measure, log to MLflow, write tables.\n\n"
             "Examples:\n\n  capsbench run suite=accuracy\n\n  capsbench run suite=accuracy budget=smoke seeds=[0,1,2]\n\n"
             "  capsbench run suite=accuracy models=[capsnet] model_args.capsnet.routing_iterations=1\n\n"
             "Budgets: smoke (seconds, tests), quick (default, minutes on a laptop CPU), paper (published sizes, GPU).")
def run(overrides: Overrides = None) -> None:
    from capsbench.config import compose
    from capsbench.runner import run_suite

    try:
        cfg = compose(list(overrides or []))
        _setup_logging()
        result = run_suite(cfg)
    except CapsbenchError as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        _fail("interrupted: finished checkpoints are kept and training resumes from its last epoch; run the same command again", 130)
    typer.echo(result.markdown)
    typer.echo(f"written: {', '.join(str(p) for p in result.paths.values())}")


@app.command(help="Train one model (or fetch it from the checkpoint cache) and print where it is.\n\n"
             "Examples:\n\n  capsbench train model=capsnet dataset=mnist\n\n  capsbench train model=cnn_9x9 budget=smoke seed=1")
def train(overrides: Overrides = None) -> None:
    from capsbench.config import compose, parse_overrides
    from capsbench.runner import load_data
    from capsbench.training import obtain_model

    try:
        items = list(overrides or [])
        raw = parse_overrides(items)
        if "model" not in raw:
            raise CapsbenchError("which model? add model=NAME (see `capsbench list models`)")
        rest = [i for i in items if not i.startswith(("model=", "seed="))]
        cfg = compose([*rest, f"models=[{raw['model']}]", f"seeds=[{raw.get('seed', '0')}]"], require_suite=False)
        _setup_logging()
        trained = obtain_model(cfg, raw["model"], cfg.seeds[0], load_data(cfg))
    except CapsbenchError as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        _fail("interrupted: training resumes from its last finished epoch when you run the same command again", 130)
    source = "cache" if trained.cached else "trained"
    typer.echo(f"{raw['model']} ({source}): best epoch {trained.meta['best_epoch']}, "
               f"validation accuracy {100 * trained.meta['best_val_accuracy']:.2f} %\ncheckpoint: {trained.path}")


@app.command(help="Tables across every finished tracked run (all seeds and invocations), published numbers beside "
             "measured ones, plots, and a summary.md, under <output_dir>/report/.\n\n"
             "Examples:\n\n  capsbench report\n\n  capsbench report suite=accuracy budget=quick\n\n"
             "  capsbench report models=[capsnet,cnn_9x9] since=2026-11-01 until=2026-11-30T18:00\n\n"
             "Keys: suite, models, dataset, budget, version, since, until, output_dir, tracking.uri, baselines_dir. "
             "Runs of different budgets or capsbench versions are never mixed.")
def report(overrides: Overrides = None) -> None:
    from capsbench.config import compose_report
    from capsbench.summary import build_report

    try:
        cfg = compose_report(list(overrides or []))
        _setup_logging()
        result = build_report(cfg)
    except CapsbenchError as exc:
        _fail(str(exc))
    for rep in result.suites:
        typer.echo(f"## {rep.suite}\n\n{rep.markdown}")
    typer.echo(f"summary: {result.summary}")


@app.command(name="list", help="List registered models, datasets or suites.\n\nExample: capsbench list models")
def list_(what: Annotated[str, typer.Argument(help="models, datasets or suites")] = "models") -> None:
    from capsbench.data import DATASETS
    from capsbench.models import MODELS
    from capsbench.suites import SUITES

    tables = {
        "models": {n: MODELS.get(n).description for n in MODELS},
        "datasets": {n: DATASETS.get(n).description for n in DATASETS},
        "suites": {n: SUITES.get(n).description for n in SUITES},
    }
    if what not in tables:
        from capsbench.registry import close_matches

        _fail(f"cannot list {what!r}: {close_matches(what, list(tables))}")
    for name, description in tables[what].items():
        typer.echo(f"{name:14s} {description}")


@app.command(name="show-config", help="Print the composed config a run would use.\n\nExample: capsbench show-config suite=accuracy budget=smoke")
def show_config(overrides: Overrides = None) -> None:
    from capsbench.config import compose, to_yaml

    try:
        cfg = compose(list(overrides or []))
    except CapsbenchError as exc:
        _fail(str(exc))
    typer.echo(to_yaml(cfg), nl=False)


def main() -> None:
    app()
