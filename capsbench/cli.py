"""The `capsbench` command line (Typer): parsing and printing only; the work happens in the library.

`--help`, `--version`, `list` and `show-config` never import torch: heavy modules load inside the commands that
need them, after the input is validated."""

from __future__ import annotations

import json
import logging
import sys
from typing import Annotated, Any, Optional

import typer

from capsbench.errors import CapsbenchError
from capsbench.util.registry import close_matches
from capsbench.util.version import __version__


def _examples(*commands: str) -> str:
    """An examples paragraph that help never rewraps (Click's \\b marker): a command is never broken mid-line."""
    return "Examples:\n\n\b\n" + "\n".join(f"  {c}" for c in commands)


app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Benchmark capsule networks against CNN baselines under one protocol.\n\n"
    + _examples(
        "capsbench run suite=accuracy",
        "capsbench run suite=accuracy budget=smoke seeds=[0,1]",
        "capsbench report",
        "capsbench list models",
    ),
)

Overrides = Annotated[
    Optional[list[str]],
    typer.Argument(help="key=value settings, e.g. suite=accuracy seeds=[0,1,2]", show_default=False),
]
FORMATS = ("text", "json")
Format = Annotated[
    str, typer.Option("--format", metavar="[text|json]", help="text (default) or json", show_default=False)
]
Quiet = Annotated[
    bool, typer.Option("-q", "--quiet", help="No progress bars, warnings only; print where the outputs are.")
]


def _fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        _fail(f"unknown --format {fmt!r}: {close_matches(fmt, list(FORMATS))}")


def _version(show: bool) -> None:
    if show:
        typer.echo(f"capsbench {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print capsbench's version and exit.")
    ] = False,
) -> None:
    """Benchmark capsule networks against CNN baselines under one protocol."""


def _setup_logging(quiet: bool = False) -> None:
    """INFO lines on stderr (warnings only with --quiet, which also turns progress bars off)."""
    from capsbench.util.progress import set_quiet  # lazy: tqdm, which --help does not need

    set_quiet(quiet)
    logging.basicConfig(
        level=logging.WARNING if quiet else logging.INFO,
        format="%(asctime)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )


@app.command(
    help="Run a suite: train or reuse checkpoints, measure, log to MLflow, write tables.\n\n"
    + _examples(
        "capsbench run suite=accuracy",
        "capsbench run suite=accuracy budget=smoke seeds=[0,1,2]",
        "capsbench run suite=[accuracy,robustness] launcher=ray",
        "capsbench run suite=accuracy models=[capsnet] model_args.capsnet.routing_iterations=1",
        "capsbench run suite=robustness budget=smoke --format json",
    )
    + "\n\nBudgets: smoke (seconds, tests), quick (default, minutes on a laptop CPU), paper (published sizes, GPU). "
    "Finished units are kept: after Ctrl-C or a kill the same command measures only what is missing "
    "(remeasure=true measures everything again)."
)
def run(overrides: Overrides = None, quiet: Quiet = False, fmt: Format = "text") -> None:
    """`capsbench run`: compose, plan, launch and tabulate the named suites."""
    from capsbench.config.compose import compose_suites  # lazy: torch-free, but --help does not need it

    _check_format(fmt)
    try:
        cfgs = compose_suites(list(overrides or []))
        from capsbench.run.driver import run_suites  # heavy: only once the input is known to be good
        from capsbench.util.progress import redirect_logging  # loaded already by the line above

        _setup_logging(quiet)
        with redirect_logging():
            results = run_suites(cfgs)
    except CapsbenchError as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        _fail(
            "interrupted: every finished unit and checkpoint is kept, and training resumes from its last epoch; "
            "run the same command again to measure only what is missing",
            130,
        )
    if fmt == "json":
        typer.echo(json.dumps([_run_json(cfg, result) for cfg, result in zip(cfgs, results)], indent=1))
        return
    for cfg, result in zip(cfgs, results):
        if not quiet:
            typer.echo(result.markdown)
        typer.echo(_where(cfg, result))


def _run_json(cfg: Any, result: Any) -> dict[str, Any]:
    """A suite's outcome for scripts: its files, MLflow run, record count and the units that failed."""
    return {
        "suite": result.suite,
        "budget": cfg.budget,
        "records": len(result.records),
        "files": {name: str(path) for name, path in result.paths.items()},
        "mlflow": {"run_id": result.parent_run_id, "tracking_uri": cfg.tracking.uri},
        "missing": [{"unit": r.spec.name, "error": r.error} for r in result.missing],
    }


def _where(cfg: Any, result: Any) -> str:
    """Where a suite's outputs are: tables, records, figures, and its MLflow run with the command to browse it."""
    out = result.paths["table.md"].parent
    figures = sorted(p.name for p in result.paths.values() if p.suffix in (".png", ".pdf"))
    lines = [f"{result.suite}: tables {out}/table.{{md,tex,csv}}, records {out}/records.{{csv,jsonl}}"]
    if figures or (out / "figures").is_dir():
        lines.append(
            f"  figures: {out}/"
            + (", ".join(figures) if figures else "")
            + (" and figures/" if (out / "figures").is_dir() else "")
        )
    if result.missing:
        lines.append(
            f"  {len(result.missing)} unit(s) failed and are missing from the tables; run the same command again"
        )
    if result.parent_run_id:
        lines.append(
            f"  MLflow run {result.parent_run_id} in {cfg.tracking.uri}; browse: "
            f"uv run mlflow ui --backend-store-uri {cfg.tracking.uri}"
        )
    return "\n".join(lines)


@app.command(
    help="Train one model (or fetch it from the checkpoint cache) and print where it is.\n\n"
    + _examples(
        "capsbench train model=capsnet dataset=mnist",
        "capsbench train model=cnn_9x9 budget=smoke seed=1",
        "capsbench train model=cnn_9x9 budget=smoke --format json",
    )
)
def train(overrides: Overrides = None, quiet: Quiet = False, fmt: Format = "text") -> None:
    """`capsbench train`: the checkpoint of one model and seed, from the cache or trained now."""
    from capsbench.config.compose import compose, parse_overrides  # lazy: torch-free, but --help does not need it

    _check_format(fmt)
    try:
        items = list(overrides or [])
        raw = parse_overrides(items)
        if "model" not in raw:
            raise CapsbenchError("which model? add model=NAME (see `capsbench list models`)")
        rest = [i for i in items if not i.startswith(("model=", "seed="))]
        cfg = compose([*rest, f"models=[{raw['model']}]", f"seeds=[{raw.get('seed', '0')}]"], require_suite=False)
        from capsbench.run.execute import trained as train_unit  # heavy: only once the input is known to be good
        from capsbench.run.plan import training_unit  # with the line above: imports torch
        from capsbench.util.progress import redirect_logging  # loaded already by the lines above

        _setup_logging(quiet)
        with redirect_logging():
            trained = train_unit(training_unit(cfg, raw["model"], cfg.seeds[0]))
    except CapsbenchError as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        _fail("interrupted: training resumes from its last finished epoch when you run the same command again", 130)
    source = "cache" if trained.cached else "trained"
    if fmt == "json":
        meta = trained.meta
        summary = {"model": raw["model"], "seed": cfg.seeds[0], "source": source, "key": trained.key,
                   "checkpoint": str(trained.path), "best_epoch": meta["best_epoch"],
                   "best_val_accuracy": 100 * meta["best_val_accuracy"], "history": meta["history"]}
        typer.echo(json.dumps(summary, indent=1))
        return
    typer.echo(
        f"{raw['model']} ({source}): best epoch {trained.meta['best_epoch']}, "
        f"validation accuracy {100 * trained.meta['best_val_accuracy']:.2f} %\ncheckpoint: {trained.path}"
    )


@app.command(
    help="Tables across every finished tracked run (all seeds and invocations), published numbers beside "
    "measured ones, figures, and one report.md and standalone report.tex, under <output_dir>/report/.\n\n"
    + _examples(
        "capsbench report",
        "capsbench report suite=accuracy budget=quick",
        "capsbench report models=[capsnet,cnn_9x9] since=2026-11-01 until=2026-11-30T18:00",
        "capsbench report --format json",
    )
    + "\n\nKeys: suite, models, dataset, budget, version, since, until, output_dir, tracking.uri, baselines_dir. "
    "Runs of different budgets or capsbench versions are never mixed."
)
def report(overrides: Overrides = None, quiet: Quiet = False, fmt: Format = "text") -> None:
    """`capsbench report`: tables, figures and claims across the tracked runs."""
    from capsbench.config.compose import compose_report  # lazy: torch-free, but --help does not need it

    _check_format(fmt)
    try:
        cfg = compose_report(list(overrides or []))
        from capsbench.reporting.report import build_report  # heavy: only once the input is known to be good
        from capsbench.util.progress import redirect_logging  # loaded already by the line above

        _setup_logging(quiet)
        with redirect_logging():
            result = build_report(cfg)
    except CapsbenchError as exc:
        _fail(str(exc))
    if fmt == "json":
        typer.echo(json.dumps(_report_json(result), indent=1))
        return
    for section in result.sections:
        typer.echo(f"## {section.suite}\n\n{section.output.paths['table.md'].read_text()}")
    if result.claims:
        from capsbench.reporting.verdicts import render_markdown  # loaded already by build_report

        typer.echo(f"## Claims\n\n{render_markdown(result.claims)}")
    typer.echo(f"report: {result.markdown}\nLaTeX: {result.latex}")


def _report_json(result: Any) -> dict[str, Any]:
    """The report for scripts: its documents, each suite's files and runs, and every claim's verdict."""
    return {
        "report": {"markdown": str(result.markdown), "latex": str(result.latex)},
        "suites": [
            {
                "suite": s.suite,
                "budget": s.budget,
                "runs": [r.run_id for r in s.runs],
                "files": {name: str(path) for name, path in s.output.paths.items()},
            }
            for s in result.sections
        ],
        "claims": [{"id": j.claim.id, "verdict": j.verdict, "statement": j.claim.statement} for j in result.claims],
    }


def _catalog(what: str) -> list[dict[str, Any]]:
    """Rows for `list models|datasets|suites`, read from the torch-free registries."""
    import dataclasses

    if what == "models":
        from capsbench.models import MODELS  # lazy: the registries are torch-free, but --help needs none

        return [
            {
                "name": n,
                "description": MODELS.get(n).description,
                "class": MODELS.get(n).target,
                "arguments": MODELS.get(n).arguments(),
            }
            for n in MODELS
        ]
    if what == "datasets":
        from capsbench.data import DATASETS  # lazy, as above

        return [
            {
                "name": n,
                "description": (d := DATASETS.get(n)).description,
                "in_channels": d.in_channels,
                "image_size": d.image_size,
                "num_classes": d.num_classes,
                "train_crop": d.train_crop,
            }
            for n in DATASETS
        ]
    from capsbench.suites import CATALOG  # lazy, as above

    return [
        {
            "name": n,
            "description": (e := CATALOG.get(n)).description,
            "class": e.target,
            "params": dataclasses.asdict(e.params()),
        }
        for n in CATALOG
    ]


@app.command(
    name="list",
    help="List registered models, datasets or suites, or the checkpoints in the cache.\n\n"
    + _examples(
        "capsbench list models",
        "capsbench list suites --format json",
        "capsbench list checkpoints [cache_dir=DIR | output_dir=DIR]",
    ),
)
def list_(
    what: Annotated[str, typer.Argument(help="models, datasets, suites or checkpoints")] = "models",
    overrides: Overrides = None,
    fmt: Format = "text",
) -> None:
    """`capsbench list`: the registries, or the checkpoints in the cache."""
    _check_format(fmt)
    kinds = ("models", "datasets", "suites", "checkpoints")
    if what not in kinds:
        _fail(f"cannot list {what!r}: {close_matches(what, list(kinds))}")
    if what == "checkpoints":
        from capsbench.run.checkpoint_list import cache_directory, list_checkpoints, text_lines  # lazy: torch-free

        try:
            directory = cache_directory(list(overrides or []))
        except CapsbenchError as exc:
            _fail(str(exc))
        rows = list_checkpoints(directory)
        if fmt == "json":
            typer.echo(json.dumps(rows, indent=1))
        elif rows:
            typer.echo("\n".join(text_lines(rows)))
        else:
            typer.echo(f"no checkpoints in {directory}", err=True)
        return
    if overrides:
        _fail(f"`capsbench list {what}` takes no key=value settings, got {' '.join(overrides)}")
    rows = _catalog(what)
    if fmt == "json":
        typer.echo(json.dumps(rows, indent=1, default=list))
        return
    for entry in rows:
        typer.echo(f"{entry['name']:14s} {entry['description']}")


@app.command(
    name="show-config",
    help="Print the composed config a run would use (device=auto is resolved when the run starts).\n\n"
    + _examples(
        "capsbench show-config suite=accuracy budget=smoke", "capsbench show-config suite=robustness --format json"
    ),
)
def show_config(overrides: Overrides = None, fmt: Format = "text") -> None:
    """`capsbench show-config`: the composed config a run would use."""
    from capsbench.config.compose import compose, to_dict, to_yaml  # lazy: torch-free, but --help does not need it

    _check_format(fmt)
    try:
        cfg = compose(list(overrides or []), resolve_device=False)
    except CapsbenchError as exc:
        _fail(str(exc))
    if fmt == "json":
        typer.echo(json.dumps(to_dict(cfg), indent=1))
    else:
        typer.echo(to_yaml(cfg), nl=False)


def main() -> None:
    """The console script's entry point."""
    app()


if __name__ == "__main__":
    main()
