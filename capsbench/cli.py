"""The `capsbench` command line (Typer): parsing and printing only; the work happens in the library.

`--help`, `--version`, `list` and `show-config` never import torch: heavy modules load inside the commands that
need them, after the input and the machine are checked. Exit statuses (capsbench.errors): 0 every unit finished,
1 a check-model check failed, 2 bad input (nothing written), 3 a unit failed or a fault stopped the run (`report`: a
suite was skipped, the others reported; any command: standard output could not be written), 130 / 143 SIGINT /
SIGTERM, 141 standard output closed by its reader."""

from __future__ import annotations

import json
import logging
import signal
import sys
from typing import Annotated, Any, Optional

import typer

from capsbench.errors import EXIT_RUN_FAILED, CapsbenchError
from capsbench.util.registry import close_matches
from capsbench.util.signals import exit_status, ignore_signals, received, signals_raise
from capsbench.util.stdout import OutputLost, guard_stdout, silence_stdout
from capsbench.util.uris import browse_hint
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
DryRun = Annotated[
    bool, typer.Option("--dry-run", help="Print the plan and its estimated time on the run's device; run and write "
                                         "nothing.")
]
Gpu = Annotated[
    Optional[str], typer.Option("--gpu", metavar="NAME", help="With --dry-run and device=cuda where there is no GPU: "
                                "the GPU to price (H100 or H200; default H100); refused for a run on the CPU.",
                                show_default=False)
]


def _fail(message: str, code: int = 2) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


class _Told:
    """Whether this process printed its line about a signal (main() prints one where a command did not)."""

    signal = False


def _interrupted(exc: KeyboardInterrupt, then: str) -> None:
    """One line for Ctrl-C or SIGTERM, and exit 130 or 143. The clean-up's own account of what it did (notes the
    driver adds to the exception: the MLflow runs it marked KILLED, or could not) comes first."""
    _Told.signal = True
    _fail(f"{_signal_name(exit_status(exc) - 128)}: " + "; ".join([*getattr(exc, "__notes__", []), then]),
          exit_status(exc))


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
        "capsbench run suite=claims budget=smoke claims=[sabour2017-mnist-r3]",
        "capsbench run suite=claims budget=paper device=cuda --dry-run --gpu H200",
    )
    + "\n\nsuite=claims plans and runs what the published claims need. "
    "Budgets: smoke (seconds, tests), quick (default, minutes on a laptop CPU), paper (published sizes, GPU). "
    "Finished units are kept: after Ctrl-C or a kill the same command measures only what is missing "
    "(remeasure=true measures everything again)."
)
def run(overrides: Overrides = None, quiet: Quiet = False, fmt: Format = "text", dry_run: DryRun = False,
        gpu: Gpu = None) -> None:
    """`capsbench run`: parse, compose, check, plan, launch and tabulate the named suites (suite=claims: what the
    claims need, then their verdicts), all through the one driver; with --dry-run, the plan and its time only."""
    _check_format(fmt)
    if gpu is not None and not dry_run:
        _fail("--gpu names the GPU a --dry-run prices; add --dry-run (a real run uses the GPU it finds)")
    if dry_run:
        _dry_run(overrides, gpu or "H100", fmt, named=gpu is not None)
        return
    with signals_raise():
        try:
            plan = _plan(_request(overrides), overrides)
            from capsbench.run.driver import run_plan  # heavy: only once the input is known to be good
            from capsbench.util.progress import redirect_logging  # loaded already by the line above

            _setup_logging(quiet)
            with redirect_logging():
                result = run_plan(plan)
        except CapsbenchError as exc:
            _fail(str(exc), exc.exit_status)
        except KeyboardInterrupt as exc:
            _interrupted(exc, "every finished unit and checkpoint is kept and training resumes from its last epoch: "
                              "run the same command again to measure only what is missing")
    _print_run(plan, result, quiet, fmt)
    if result.missing:
        from capsbench.run.driver import failure_line  # loaded already by run_plan

        typer.echo(f"error: {len(result.missing)} unit(s) failed (each suite's MLflow run is marked FAILED):",
                   err=True)
        for unit in result.missing:
            typer.echo(f"  {failure_line(unit)}", err=True)
        raise typer.Exit(EXIT_RUN_FAILED)


def _request(overrides: list[str] | None) -> Any:
    """The command line's key=value settings, parsed once (with config=FILE read): every command's door."""
    from capsbench.config.request import parse_command_line  # lazy: torch-free, but --help does not need it

    return parse_command_line(list(overrides or []))


def _dry_run(overrides: list[str] | None, gpu: str, fmt: str, named: bool = False) -> None:
    """The plan and its estimated time on the run's device (device=cuda where there is none: `gpu`, which the user
    `named` with --gpu, or the default); nothing runs."""
    try:
        plan = _plan(_request(overrides), overrides, gpu=gpu)
        devices = {str(section.cfg.device) for section in plan.sections}
        if named and devices and not any(d.startswith("cuda") for d in devices):
            raise CapsbenchError(f"--gpu {gpu} prices a CUDA run, but this run's device is "
                                 f"{', '.join(sorted(devices))}: add device=cuda")
        from capsbench.run.dry_run import describe, lines  # heavy: only once the input is known to be good

        described = describe(plan, gpu)
    except CapsbenchError as exc:
        _fail(str(exc), exc.exit_status)
    if fmt == "json":
        typer.echo(json.dumps(described, indent=1))
    else:
        typer.echo("\n".join(lines(described)))


def _plan(request: Any, overrides: list[str] | None, gpu: str | None = None) -> Any:
    """The driver's plan of a `capsbench run`, every section's config checked against the machine before any work:
    one section per suite, or the sections the claims need and the step that judges them. `gpu`: a dry run's, whose
    device=cuda is priced as that GPU and not checked against this machine."""
    from capsbench.config.compose import compose_suites, settle_device  # lazy: torch-free
    from capsbench.config.preflight import check_before_work  # lazy, as above

    if _is_claims(request):
        from capsbench.run.claims_plan import plan_claims  # imports the suites (torch): only for suite=claims

        plan = plan_claims(request, "capsbench run " + " ".join(overrides or []), gpu=gpu).plan
        for section in plan.sections:
            try:
                check_before_work(section.cfg)
            except CapsbenchError as exc:
                raise CapsbenchError(f"{exc} (needed by the claims section {section.key}; leave its claims out with "
                                     "claims=[...])") from None
        return plan
    cfgs = compose_suites(request, resolve_device=False)
    for cfg in cfgs:
        check_before_work(cfg)
        if gpu is None or not str(cfg.device).startswith("cuda"):
            settle_device(cfg)  # imports torch: after every check that does not need it
    from capsbench.run.plan import suite_plan  # with torch, now that the input is known to be good

    return suite_plan(cfgs)


def _is_claims(request: Any) -> bool:
    """Whether the request is suite=claims (alone); naming it in a list of suites is an error."""
    suite = request.get("suite")
    names = [str(n) for n in suite] if isinstance(suite, list) else [str(suite)]
    if "claims" in names and len(names) > 1:
        raise CapsbenchError("suite=claims runs alone: it plans the suites each claim needs; run others separately")
    return names == ["claims"]


def _print_run(plan: Any, result: Any, quiet: bool, fmt: str) -> None:
    """What a run made: its tables (or the claims table) and where everything is; JSON for scripts."""
    if fmt == "json":
        rows = [_run_json(s.cfg, s) for s in result.sections]
        if result.finished is not None:
            rows.append({"suite": plan.finish.name, "budget": plan.cfg.budget,
                         "files": {n: str(p) for n, p in result.finished.paths.items()},
                         "mlflow": {"run_id": result.run_id, "tracking_uri": plan.cfg.tracking.uri},
                         **result.finished.summary})
        typer.echo(json.dumps(rows, indent=1))
        return
    for section in result.sections:
        if not quiet and section.markdown and result.finished is None:
            typer.echo(section.markdown)
        typer.echo(_where(section.cfg, section))
    if result.finished is not None:
        if not quiet:
            typer.echo(result.finished.markdown)
        paths = result.finished.paths
        root = paths["claims.md"].parent
        typer.echo(f"claims: {root}/claims.{{md,tex,csv}}; report {root}/report.{{md,tex}}; records "
                   f"{paths['records.jsonl']}")
        if result.run_id:
            typer.echo(f"  MLflow run {result.run_id} in {plan.cfg.tracking.uri}; browse: "
                       f"{browse_hint(plan.cfg.tracking.uri, result.experiment_id)}")


def _run_json(cfg: Any, result: Any) -> dict[str, Any]:
    """A suite's outcome for scripts: its files, MLflow run, record count and the units that failed."""
    return {
        "suite": result.suite,
        "budget": cfg.budget,
        "records": len(result.records),
        "headline": result.headline,  # model -> the first table's numbers (mean over seeds), named as in MLflow
        "values": result.values,  # the same numbers per model, seed and sweep value, with n and 95 % interval
        "test_images": _draws(result.records),  # which test images, when fewer than all: the draw that chose them
        "model_cards": [str(p) for name, p in result.paths.items() if name.startswith("model-cards/")],
        "files": {name: str(path) for name, path in result.paths.items()},
        "latest": None if result.latest is None else str(result.latest),
        "mlflow": {"run_id": result.parent_run_id, "tracking_uri": cfg.tracking.uri,
                   "experiment_id": result.experiment_id},
        "missing": [{"unit": r.spec.name, "error": r.error} for r in result.missing],
    }


def _draws(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The test draws the records name (capsbench.data.test_subset), each once; [] for the whole test split."""
    columns = ("test_draw", "test_subset_seed", "test_subset_sha256")
    found = {tuple(r.get(c) for c in columns) for r in records if r.get("test_draw")}
    return [dict(zip(columns, d)) for d in sorted(found, key=str)]


def _where(cfg: Any, result: Any) -> str:
    """Where a suite's outputs are: tables, records, figures, and its MLflow run with the command to browse it."""
    if "table.md" in result.paths:
        out = result.paths["table.md"].parent
        figures = sorted(p.name for p in result.paths.values() if p.suffix in (".png", ".pdf"))
        lines = [f"{result.suite}: tables {out}/table.{{md,tex,csv}}, records {out}/records.{{csv,jsonl}}",
                 f"  latest run's copy: {result.latest}/"]
        if figures or (out / "figures").is_dir():
            lines.append(
                f"  figures: {out}/"
                + (", ".join(figures) if figures else "")
                + (" and figures/" if (out / "figures").is_dir() else "")
            )
    else:
        lines = [f"{result.suite}: no tables, no unit finished"]
    if result.missing:
        lines.append(f"  {len(result.missing)} unit(s) failed and are missing from the tables (listed below)")
    if result.records and len(cfg.seeds) == 1:
        lines.append("  one training seed: the tables compare these trained weights, not the architectures (nothing "
                     "is bold); add seeds=[0,1,2] to the command to compare the models")
    if result.parent_run_id:
        uri = cfg.tracking.uri
        lines.append(f"  MLflow run {result.parent_run_id} in {uri}; browse: {browse_hint(uri, result.experiment_id)}")
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
    from capsbench.config.checks import capped_subsets  # lazy: torch-free, as in run
    from capsbench.config.compose import compose, settle_device  # lazy, as above
    from capsbench.config.preflight import check_before_work  # lazy, as above

    _check_format(fmt)
    with signals_raise():
        try:
            request = _request(overrides)
            model, seed = request.get("model"), request.get("seed", 0)
            if model is None:
                raise CapsbenchError("which model? add model=NAME (see `capsbench list models`)")
            if not isinstance(model, str):  # the request holds plain values: a list for model=[a,b]
                raise CapsbenchError(f"model= names one model here, got {model!r}; train them one by one, or "
                                     "`capsbench run suite=accuracy models=[...]` trains several")
            if isinstance(seed, bool) or not isinstance(seed, int):
                several = "; train them one by one, or `capsbench run suite=accuracy seeds=[...]` trains several"
                raise CapsbenchError(f"seed= takes one integer here, e.g. seed=0, got {seed!r}"
                                     + (several if isinstance(seed, list) else ""))
            cfg = compose(request.without("model", "seed").merged({"models": [model], "seeds": [seed]}),
                          require_suite=False, resolve_device=False)
            check_before_work(cfg)
            settle_device(cfg)  # imports torch: after every check that does not need it
            from capsbench.run.execute import trained as train_unit  # heavy: only once the input is known to be good
            from capsbench.run.plan import training_unit  # with the line above: imports torch
            from capsbench.util.progress import redirect_logging  # loaded already by the lines above

            _setup_logging(quiet)
            for line in capped_subsets(cfg.data, cfg.dataset):
                logging.getLogger("capsbench").warning(line)
            with redirect_logging():
                trained = train_unit(training_unit(cfg, cfg.models[0], cfg.seeds[0]))
        except CapsbenchError as exc:
            _fail(str(exc), exc.exit_status)
        except KeyboardInterrupt as exc:
            _interrupted(exc, "training resumes from its last finished epoch when you run the same command again")
    source = "cache" if trained.cached else "trained"
    if "init" in trained.meta["identity"]:
        source += f", fine-tuned from weights sha256:{trained.meta['identity']['init']['weights_sha256'][:16]}"
    if fmt == "json":
        meta = trained.meta
        summary = {"model": cfg.models[0], "seed": cfg.seeds[0], "source": source, "key": trained.key,
                   "checkpoint": str(trained.path), "best_epoch": meta["best_epoch"],
                   "best_val_accuracy": 100 * meta["best_val_accuracy"], "history": meta["history"]}
        typer.echo(json.dumps(summary, indent=1))
        return
    typer.echo(
        f"{cfg.models[0]} ({source}): best epoch {trained.meta['best_epoch']}, "
        f"validation accuracy {100 * trained.meta['best_val_accuracy']:.2f} %\ncheckpoint: {trained.path}"
    )


@app.command(
    help="Tables across every finished tracked run (all seeds and invocations), published numbers beside "
    "measured ones, figures, and one report.md and standalone report.tex, under <output_dir>/report/.\n\n"
    + _examples(
        "capsbench report",
        "capsbench report suite=accuracy budget=quick",
        "capsbench report models=[capsnet,cnn_9x9] since=2026-11-01 until=2026-11-30T18:00",
        "capsbench report latest=true claims=true",
        "capsbench report --format json",
    )
    + "\n\nKeys: suite, models, dataset, budget, version, code, since, until, latest, claims, output_dir, "
    "tracking.uri, baselines_dir, one_seed_verdicts, latex.eps. Runs of different budgets, capsbench versions, code "
    "or settings are never mixed: such a suite is skipped with its reason, the others are reported, and the exit "
    "status is 3 (latest=true takes each suite's newest run and the older ones measured alike). claims=true adds "
    "the claims table."
)
def report(overrides: Overrides = None, quiet: Quiet = False, fmt: Format = "text") -> None:
    """`capsbench report`: tables, figures and claims across the tracked runs."""
    from capsbench.config.compose import compose_report  # lazy: torch-free, but --help does not need it
    from capsbench.config.preflight import check_tracking, check_writable  # lazy, as above

    _check_format(fmt)
    try:
        cfg = compose_report(_request(overrides))
        check_tracking(cfg.tracking.uri, reading=True)
        check_writable(cfg.output_dir, "output_dir", "the report is written under it: choose another output_dir= "
                                                     f"and read this store with tracking.uri={cfg.tracking.uri}")
        from capsbench.reporting.report import build_report  # heavy: only once the input is known to be good
        from capsbench.util.progress import redirect_logging  # loaded already by the line above

        _setup_logging(quiet)
        with redirect_logging():
            result = build_report(cfg)
    except CapsbenchError as exc:
        _fail(str(exc))
    if fmt == "json":
        typer.echo(json.dumps(_report_json(result), indent=1))
    else:
        for section in result.sections:
            typer.echo(f"## {section.suite}\n\n{section.output.paths['table.md'].read_text()}")
        if result.claims:
            from capsbench.reporting.verdicts import render_markdown  # loaded already by build_report

            typer.echo(f"## Claims\n\n{render_markdown(result.claims)}")
        typer.echo(f"report: {result.markdown}\nLaTeX: {result.latex}\nlatest report's copy: {result.latest}/")
    for why in result.skipped.values():
        typer.echo(f"skipped: {why}", err=True)
    if result.skipped:
        raise typer.Exit(EXIT_RUN_FAILED)


def _arguments(spec: Any) -> dict[str, Any]:
    """A model's arguments; for an external model whose source cannot be read, why (it is still listed)."""
    try:
        return spec.arguments()
    except CapsbenchError as exc:
        return {"error": str(exc)}


def _report_json(result: Any) -> dict[str, Any]:
    """The report for scripts: its documents, each suite's files and runs, and every claim's verdict."""
    return {
        "report": {"markdown": str(result.markdown), "latex": str(result.latex)},
        "suites": [
            {
                "suite": s.suite,
                "budget": s.budget,
                "runs": [r.run_id for r in s.runs],
                "records": len(s.output.frame),
                "values": s.values,  # the first table's numbers per model, seed and sweep value, with n and interval
                "files": {name: str(path) for name, path in s.output.paths.items()},
            }
            for s in result.sections
        ],
        "claims": [{"id": j.claim.id, "verdict": j.verdict, "statement": j.claim.statement} for j in result.claims],
        "skipped": result.skipped,
        "latest": str(result.latest),
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
                "arguments": _arguments(MODELS.get(n)),
                "external": getattr(MODELS.get(n), "origin", None),
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
    if what == "attacks":
        from capsbench.attacks import CATALOG as ATTACKS  # lazy, as above
        from capsbench.attacks import table_order

        return [
            {
                "name": n,
                "description": (e := ATTACKS.get(n)).label + (" (black-box)" if not e.white_box else "")
                + (" (against the reconstruction detector: params.detection_fpr)" if e.defended else ""),
                "class": e.target,
                "settings": {k: {"default": v, "range": e.ranges.get(k)} for k, v in e.arguments.items()},
            }
            for n in table_order()[1:]
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
    help="List registered models, datasets, suites or attacks (with their settings, params.attack_args.<attack>.*), "
    "or the checkpoints in the cache.\n\n"
    + _examples(
        "capsbench list models",
        "capsbench list attacks",
        "capsbench list suites --format json",
        "capsbench list checkpoints [cache_dir=DIR | output_dir=DIR]",
    ),
)
def list_(
    what: Annotated[str, typer.Argument(help="models, datasets, suites, attacks or checkpoints")] = "models",
    overrides: Overrides = None,
    fmt: Format = "text",
) -> None:
    """`capsbench list`: the registries, or the checkpoints in the cache."""
    _check_format(fmt)
    kinds = ("models", "datasets", "suites", "attacks", "checkpoints")
    if what not in kinds:
        _fail(f"cannot list {what!r}: {close_matches(what, list(kinds))}")
    if what == "checkpoints":
        from capsbench.run.checkpoint_list import cache_directory, list_checkpoints, text_lines  # lazy: torch-free

        try:
            directory = cache_directory(_request(overrides))
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
    if overrides and what != "models":
        _fail(f"`capsbench list {what}` takes no key=value settings (models: register.<alias>= and config=), "
              f"got {' '.join(overrides)}")
    if what == "models":
        from capsbench.config.external import register_listed  # lazy: torch-free, but --help does not need it

        try:
            register_listed(_request(overrides))
        except CapsbenchError as exc:
            _fail(str(exc))
    rows = _catalog(what)
    if fmt == "json":
        typer.echo(json.dumps(rows, indent=1, default=list))
        return
    for entry in rows:
        origin = f"[external, {entry['external']}: {entry['class']}] " if entry.get("external") else ""
        settings = "; ".join(f"{k}={s['default']}" + (f" {s['range']}" if s["range"] else "")
                             for k, s in entry.get("settings", {}).items())
        typer.echo(f"{entry['name']:16s} {origin}{entry['description']}" + (f": {settings}" if settings else ""))


@app.command(
    name="check-model",
    help="Check a model against the contract every suite relies on, on real test images: output shapes, argmax of "
    "scores = argmax of logits, inputs in [0, 1] (normalisation inside the model), determinism in eval mode, finite "
    "non-zero input gradients, capsule hooks that agree with the model; prints its parameters and MACs. Exit 0 when "
    "every check passes, 1 when one fails (each failure one line saying what to change), 2 on bad input.\n\n"
    "Examples:\n\n  capsbench check-model capsnet\n\n  capsbench check-model mypkg.caps:MyCaps weights=w.pt\n\n"
    "  capsbench check-model mycaps register.mycaps=mypkg.caps:MyCaps weights=w.safetensors dataset=mnist",
)
def check_model(
    name: Annotated[str, typer.Argument(help="a built-in model, an alias, or package.module:Class")],
    overrides: Overrides = None,
    fmt: Format = "text",
) -> None:
    """`capsbench check-model`: the model contract on a real batch."""
    from capsbench.config.compose import compose  # lazy: torch-free, but --help does not need it

    _check_format(fmt)
    try:
        request = _request(overrides)
        alias, register = _check_target(name)
        weights = request.get("weights")
        if isinstance(weights, str):  # weights=PATH: this model's
            request = request.without("weights").merged({"weights": {alias: weights}})
        cfg = compose(request.merged({"register": register, "models": [alias]}), require_suite=False)
        from capsbench.run.model_trial import (
            check_model as run_checks,  # heavy: only once the input is known to be good
        )

        report = run_checks(cfg, alias)  # warnings only (Python's default): the lines below are the report
    except CapsbenchError as exc:
        _fail(str(exc))
    if fmt == "json":
        typer.echo(json.dumps({"model": alias, "dataset": cfg.dataset, "passed": report.passed, "params": report.params,
                               "macs": report.macs, "findings": [vars(f) for f in report.findings]}, indent=1))
    else:
        words = {True: "ok  ", False: "FAIL", None: "info"}
        weighed = f", weights {cfg.weights[alias]}" if alias in cfg.weights else ", untrained"
        typer.echo(f"{alias} on {cfg.dataset}{weighed}")
        for f in report.findings:
            typer.echo(f"{words[f.ok]} {f.check}" + (f": {f.text}" if f.ok is not True else ""))
        typer.echo(f"cost: {report.params:,} parameters, {report.macs:,} MACs per image (FLOPs = 2 x MACs)")
        failed = sum(f.ok is False for f in report.findings)
        typer.echo("passed: the model can go through every suite" if report.passed else f"{failed} check(s) failed")
    raise typer.Exit(0 if report.passed else 1)


def _check_target(name: str) -> tuple[str, dict[str, str]]:
    """check-model's NAME as (alias, the register.* settings that register it): a package.module:Class path gets an
    alias of its own."""
    if ":" not in name:
        return name, {}
    from capsbench.models.external import BUILT_INS  # lazy: torch-free, but --help does not need it

    alias = name.rpartition(":")[2].lower()
    alias = f"{alias}_own" if alias in BUILT_INS or not alias.isidentifier() else alias
    return alias, {alias: name}


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
        cfg = compose(_request(overrides), resolve_device=False)
    except CapsbenchError as exc:
        _fail(str(exc))
    if fmt == "json":
        typer.echo(json.dumps(to_dict(cfg), indent=1))
    else:
        typer.echo(to_yaml(cfg), nl=False)


def main() -> None:
    """The console script's entry point: a SIGINT or SIGTERM that no command reported (one held while the modules
    imported, one during parsing, or in a command that writes nothing half-way) ends with one line, 130 or 143."""
    guard_stdout()
    try:
        with signals_raise():
            app()
    except OutputLost as exc:  # the work is done and kept; only what the command printed is cut short
        silence_stdout()
        typer.echo(f"error: {exc}; what the command made is kept (files, checkpoints, MLflow runs), only what it "
                   "printed is cut short: send it to a file (> FILE) to read it whole", err=True)
        raise SystemExit(exc.status) from None
    except KeyboardInterrupt as exc:  # a signal held while the modules imported, raised before the command started
        _Told.signal = True
        typer.echo(f"error: {_signal_name(exit_status(exc) - 128)}: before the command started; nothing was written",
                   err=True)
        raise SystemExit(exit_status(exc)) from None
    except SystemExit as done:
        signum = received()
        if signum is None or _Told.signal:
            raise
        typer.echo(f"error: {_signal_name(signum)}: stopped before it finished; run the same command again", err=True)
        raise SystemExit(128 + signum) from done
    finally:
        ignore_signals()  # the outcome is settled; a signal now would only cut the process's exit short


def _signal_name(signum: int) -> str:
    return "terminated (SIGTERM)" if signum == signal.SIGTERM else "interrupted"


if __name__ == "__main__":
    main()
