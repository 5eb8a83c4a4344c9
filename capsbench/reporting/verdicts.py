"""Verdicts on published claims from records: protocol not met (the measured models miss what the published numbers
assume, or a smoke run), supported, refuted (significant the other way, in every training seed), not resolved, or
no records; with the budget, the seeds, and what each verdict needs next."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from capsbench.reporting.baselines import logged_text
from capsbench.reporting.claim_files import SIDES, Claim, Side
from capsbench.reporting.claim_tests import Evidence, decide
from capsbench.reporting.formatting import FLOAT_NOISE
from capsbench.reporting.frame import UNDERTRAINED, row_models
from capsbench.reporting.latex import tex
from capsbench.reporting.margin_tests import decide_margin
from capsbench.reporting.protocol_checks import protocol_misses, side_rows
from capsbench.suites import SUITES
from capsbench.util.stats import ALPHA, decode_outcomes

SUPPORTED, REFUTED, UNRESOLVED, NO_RECORDS = "supported", "refuted", "not resolved", "no records"
PROTOCOL_NOT_MET = "protocol not met"
REPRODUCED, DIFFERS = "reproduced", "differs"  # exact counts: seeds cannot change them, nothing is tested
VERDICTS = (SUPPORTED, REFUTED, UNRESOLVED, REPRODUCED, DIFFERS, PROTOCOL_NOT_MET, NO_RECORDS)
RELATION_WORDS = {"parity": "as good as", "no_better": "no better than"}


@dataclass(frozen=True)
class Judgement:
    claim: Claim
    verdict: str
    reason: str  # the test and its p-value, the numbers that missed the protocol, or what is missing
    better: Evidence | None = None
    worse: Evidence | None = None
    p: float | None = None
    budget: str = ""  # of the records judged ("" when there were none)
    seeds: int = 0  # training seeds measured on both sides
    needs: str = ""  # what the verdict needs next: more seeds, the paper budget, a data file, a run


@dataclass(frozen=True)
class Run:
    """The records of one suite in the report and how they were measured."""

    frame: pd.DataFrame
    model_args: dict[str, dict[str, str]]  # model -> constructor arguments as logged
    settings: dict[str, str]  # train.*, data.*, params.* as logged
    budget: str
    sides: dict[str, Run] = field(default_factory=dict)  # "better"/"worse" -> that side's own records, where apart

    def side(self, name: str) -> Run:
        """The records that stand for side `name`: its own where the claim's two sides are one model measured two
        ways (constructed apart, each in its own units), else all of them."""
        return self.sides.get(name, self)


@dataclass(frozen=True)
class Absent:
    """Why a side has no evidence that can be judged: the verdict that follows, and what would give it some."""

    verdict: str
    reason: str
    needs: str


def run_command(claim: Claim) -> str:
    """The command that plans and measures everything `claim` needs."""
    return f"capsbench run suite=claims claims=[{claim.id}]"


def judge(claim: Claim, run: Run | None, one_seed: bool = False) -> Judgement:
    """The claim's verdict from `run` (None: the report has no records of the claim's suite). `one_seed`: allow
    supported / refuted from a single training seed (stated in the verdict)."""
    if run is None:
        return Judgement(claim, NO_RECORDS, f"no {claim.suite} records in this report", needs=run_command(claim))
    sides = []
    for name in SIDES:
        found = _evidence(claim, getattr(claim, name), run.side(name))
        if isinstance(found, Absent):
            return Judgement(claim, found.verdict, found.reason, budget=run.budget, needs=found.needs)
        sides.append(found)
    better, worse = sides
    seeds = len(set(better.values) & set(worse.values)) or min(len(better.values), len(worse.values))
    kept = {"better": better, "worse": worse, "budget": run.budget, "seeds": seeds}
    misses = protocol_misses(claim, {name: run.side(name).frame for name in SIDES}, run.budget)
    if misses:
        needs = "; ".join(dict.fromkeys(m.needs for m in misses))
        return Judgement(claim, PROTOCOL_NOT_MET, "; ".join(m.text for m in misses), needs=needs, **kept)
    if better.undertrained or worse.undertrained:
        model = claim.names[0] if better.undertrained else claim.names[1]
        return Judgement(claim, UNRESOLVED, f"{model} is undertrained (below its dataset's validation floor)",
                         needs="longer training (budget=quick or paper)", **kept)
    suite = SUITES.get(claim.suite)
    metric = next(m for m in suite.metrics if m.name == claim.metric)  # checked when loaded
    if metric.exact:
        return _exact(claim, metric, better, worse, kept)
    if claim.relation != "beats":
        decision = decide_margin(claim, metric, better, worse, one_seed)
    else:
        decision = decide(claim, metric, run.budget, better, worse, one_seed, repeats=not suite.needs_training)
    verdict = {1: SUPPORTED, -1: REFUTED, 0: UNRESOLVED}[decision.direction]
    return Judgement(claim, verdict, decision.reason, p=decision.p, needs=decision.needs, **kept)


def judge_claim(claim: Claim, run: Run | None, one_seed: bool = False) -> list[Judgement]:
    """The claim's verdicts: one per device its records were measured on when its suite records the device (a cost
    claim is judged per device, never pooled across them), else one."""
    devices = _devices(claim, run)
    if len(devices) < 1:
        return [judge(claim, run, one_seed)]
    return [judge(replace(claim, sweep={**claim.sweep, "device": d}), run, one_seed) for d in devices]


def _devices(claim: Claim, run: Run | None) -> list[str]:
    if run is None or "device" in claim.sweep or "device" not in SUITES.get(claim.suite).sweep_columns:
        return []
    f = run.frame
    rows = f[(f["metric"] == claim.metric) & f["model"].isin([claim.better.model, claim.worse.model])]
    return sorted({str(d) for d in rows.get("device", pd.Series(dtype=object)).dropna()})


def _exact(claim: Claim, metric: Any, better: Evidence, worse: Evidence, kept: dict[str, Any]) -> Judgement:
    """An exact count (parameters, MACs): reproduced when each side's count prints as its published number and the
    claimed relation holds on the counts (beats: strictly, by min_effect or the ratio where given; parity: within the
    margin; no better: not better by the margin); differs otherwise, saying which."""
    wrong = [f"{side.model} counts {e.mean:.6g}, printed {side.published:g}"
             for side, e in ((claim.better, better), (claim.worse, worse))
             if side.published is not None and not printed_match(e.mean, side.published)]
    lead = (better.mean - worse.mean) * (1.0 if metric.higher_is_better else -1.0)  # > 0: `better` is better
    said = f"{better.mean:.6g} against {worse.mean:.6g}"
    if claim.ratio is not None:
        factor = better.mean / worse.mean if metric.higher_is_better else worse.mean / better.mean
        holds, said = factor >= claim.ratio, f"a factor of {factor:.3g} against the claimed {claim.ratio:g}x"
    elif claim.relation == "parity":
        holds, said = abs(lead) < claim.margin, f"{said}: {abs(lead):.6g} apart, the margin {claim.margin:g}"
    elif claim.relation == "no_better":
        holds, said = lead < claim.margin, f"{said}: a lead of {lead:+.6g}, the margin {claim.margin:g}"
    else:
        holds = lead > 0 and lead >= (claim.min_effect or 0.0)
    if not holds:
        wrong.append(f"the claimed relation does not hold: {said}")
    reason = f"exact counts ({said}; counts do not depend on the seed)"
    kept = {**kept, "seeds": 0}
    if wrong:
        return Judgement(claim, DIFFERS, f"{reason}: " + "; ".join(wrong), **kept)
    return Judgement(claim, REPRODUCED, reason + ", each as printed", **kept)


def printed_match(value: float, printed: float) -> bool:
    """Whether `value` prints as `printed` at the precision it was printed with (its shortest decimal form), rounded
    or truncated: 6.8 stands for 6.75 to 6.9 (exclusive), 161 for 160.5 to 162; 6.71 does not print as 6.8."""
    text = repr(float(printed))
    decimals = len(text.split(".")[1].rstrip("0")) if "." in text and "e" not in text else 0
    scaled, target = value * 10.0**decimals, round(printed * 10.0**decimals)
    return math.floor(scaled + 0.5 + 1e-9) == target or math.floor(scaled + 1e-9) == target


def _evidence(claim: Claim, side: Side, run: Run) -> Evidence | Absent:
    """The side's records, or why there are none that stand for it."""
    metric = side.metric or claim.metric
    rows = side_rows(run.frame, claim, side, metric, {**claim.sweep, **side.sweep})
    if rows.empty:
        return _absent(claim, side, run, metric)
    logged = run.model_args.get(side.model, {})
    wrong = {k: logged.get(k) for k, v in side.model_args.items() if logged.get(k) != logged_text(v)}
    settings = {**claim.run, **side.settings}
    wrong |= {k: run.settings.get(k) for k, v in settings.items() if run.settings.get(k) != logged_text(v)}
    if wrong:
        return Absent(NO_RECORDS, f"no records of {side.label}: measured with "
                      + ", ".join(f"{k}={v}" for k, v in wrong.items()), run_command(claim))
    if rows["seed"].duplicated().any():
        return Absent(UNRESOLVED, f"several {side.model} records per seed; name the sweep values that pick one in the "
                      "claim's sweep", "a claim file that names every sweep value")
    values = {int(r.seed): float(r.value) for r in rows.itertuples()}
    outcomes = {
        int(r.seed): decode_outcomes(r.outcomes, int(float(r.n)))
        for r in rows.itertuples()
        if isinstance(getattr(r, "outcomes", None), str)
    }
    images = int(float(rows["n"].max())) if "n" in rows and rows["n"].notna().any() else None
    one = rows.iloc[0]
    interval = (
        (float(one["ci_low"]), float(one["ci_high"]))
        if len(rows) == 1 and "ci_low" in rows and pd.notna(one["ci_low"])
        else None
    )
    undertrained = UNDERTRAINED in rows and bool(rows[UNDERTRAINED].fillna(False).astype(bool).any())
    draws = {int(r.seed): r.test_subset_sha256 if isinstance(getattr(r, "test_subset_sha256", None), str) else None
             for r in rows.itertuples()}  # which images each seed measured (None: the whole test split)
    return Evidence(values, outcomes, images, interval, undertrained, draws)


def _absent(claim: Claim, side: Side, run: Run, metric: str) -> Absent:
    """No rows stand for the side: a standard-trained side whose model was measured only trained otherwise (protocol
    not met: the claim assumes standard training), or none at all."""
    f = run.frame
    others = f[(f["model"] == side.model) & (f["dataset"] == claim.dataset) & (f["metric"] == metric)]
    names = set(row_models(others))
    if side.training is None and names and side.model not in names:
        trained = ", ".join(sorted(names))
        return Absent(PROTOCOL_NOT_MET, f"{side.model} was measured only as {trained}; the claim assumes standard "
                      "training", f"a standard-trained {side.model} ({run_command(claim)})")
    return Absent(NO_RECORDS, f"no records of {side.label} ({claim.dataset}, {metric}{_where(claim)})",
                  run_command(claim))


def _where(claim: Claim) -> str:
    return "".join(f", {k}={v}" for k, v in claim.sweep.items())


def judge_all(claims: list[Claim], runs: dict[str, Run], one_seed: bool = False) -> list[Judgement]:
    """Every claim's verdicts (one per device for a cost claim); `runs` maps a suite name to its records."""
    return [j for c in claims for j in judge_claim(c, runs.get(c.suite), one_seed)]


def describe(e: Evidence | None) -> str:
    """A measured value as text: mean ± std over seeds, or the one seed's value [95 % interval]."""
    if e is None:
        return "–"
    if e.std is not None:
        images = f", {e.images:,} images each" if e.images else ""
        std = f"{e.std:.2g}" if e.std > FLOAT_NOISE * abs(e.mean) else "0"  # an exact count's float rounding
        return f"{e.mean:.4g} ± {std} ({len(e.values)} seeds{images})"
    text = f"{e.mean:.4g}"
    return (
        text
        + (f" [{e.interval[0]:.1f}, {e.interval[1]:.1f}]" if e.interval else "")
        + (f" (n={e.images:,})" if e.images else "")
    )


def verdict_cell(j: Judgement) -> str:
    """The verdict with what it stands on, e.g. "supported (quick, 3 seeds)", "supported (no better than, quick, 3
    seeds)", "refuted (cpu, batch 1, paper, 3 repeats)" (a suite that trains nothing repeats a measurement: its seeds
    are no training seeds), "reproduced (paper)"."""
    unit = "seed" if SUITES.get(j.claim.suite).needs_training else "repeat"  # an untrained suite repeats a timing
    seeds = f"one {unit}" if j.seeds == 1 else f"{j.seeds} {unit}s" if j.seeds else ""
    relation = RELATION_WORDS.get(j.claim.relation, "") if j.verdict in (SUPPORTED, REFUTED) else ""
    where = [str(j.claim.sweep["device"])] if "device" in j.claim.sweep else []
    where += [f"batch {j.claim.sweep['batch']}"] if where and "batch" in j.claim.sweep else []
    context = ", ".join(part for part in (relation, *where, j.budget, seeds) if part)
    return j.verdict + (f" ({context})" if context else "")


def as_rows(judgements: list[Judgement]) -> list[dict[str, Any]]:
    """One row per claim, the columns every renderer shows."""
    return [
        {
            "claim": j.claim.statement,
            "source": f"{_source_line(j.claim)}, {j.claim.where}",
            "published": " vs ".join(
                "–" if s.published is None else f"{s.published:g}" for s in (j.claim.better, j.claim.worse)
            ),
            "measured": f"{describe(j.better)} vs {describe(j.worse)}",
            "verdict": j.verdict,
            "cell": verdict_cell(j),
            "needs": j.needs or "–",
            "why": j.reason + (f"; note: {j.claim.note}" if j.claim.note else ""),
            "models": f"{j.claim.better.label} vs {j.claim.worse.label}",
            "metric": j.claim.metric + _where(j.claim),
        }
        for j in judgements
    ]


RULE = (
    "Verdict rule: a claim is judged only where its measured models meet the protocol its published numbers assume "
    "(the checks each claim declares, e.g. both models at the paper's MNIST accuracy, or within a stated distance of "
    "the published error, or the paper's budget; a side without a training protocol stands for a standard-trained "
    "model; a claim and its opposite on the same models and metric declare the same checks); otherwise it is "
    "'protocol not met', with the numbers that missed, and a smoke run never meets one. A claim that model A beats "
    "model B is then supported when A is strictly ahead in the claimed direction (each metric's higher_is_better) in "
    "every training seed (a tie is no lead), a t-test on the per-seed differences gives p < "
    f"{ALPHA} (their spread floored at one image in n: seeds that agree exactly show no certainty) and, where both "
    "were measured on the same test images, the clustered McNemar test on the per-image outcomes (each distinct "
    f"image once, whatever the seeds) also gives p < {ALPHA}; with a min_effect (the size of effect the source's words "
    "carry: 'far more', 'much smaller') both tests are against it, so the 95 % interval of the difference lies above "
    "it, and a difference below it is said, not sent back for more seeds; refuted when B is ahead in every seed with "
    "both tests p < 0.05; not resolved otherwise. A claim that two models are alike (as good as; no better than) "
    "states a margin and is supported where one-sided t-tests over the seeds and Tango's score test on the per-image "
    "means put the difference inside it, refuted where a difference beyond it holds in every seed; the row says which "
    "side is ahead. With one seed the verdict is at most not resolved (one_seed_verdicts=true allows one from the "
    "per-image test, marked 'one seed'); seeds measured on one side only are compared with Welch's t-test; exact "
    "counts such as parameters do not depend on the seed and are reproduced (as printed, rounded or truncated, with "
    "the claimed relation holding) or differ; a cost claim is judged per device it was measured on, over repeated "
    'measurements (a seed changes no timing); a claimed factor ("10x slower") is tested on log values against the '
    "log of the factor. Undertrained models are never judged; a model measured with other arguments or settings than "
    "the claim names has no records for it. The budget and the seeds stand in every verdict."
)


UNSOURCED_HEADING = ("Numbers that circulate without a primary source (judged like any claim, never a paper's "
                     "result)")


def grouped(judgements: list[Judgement]) -> list[tuple[str | None, list[Judgement]]]:
    """The claims with a primary source, then (under UNSOURCED_HEADING) those without one; empty groups left out."""
    groups = [(None, [j for j in judgements if j.claim.primary]),
              (UNSOURCED_HEADING, [j for j in judgements if not j.claim.primary])]
    return [(heading, js) for heading, js in groups if js]


def render_markdown(judgements: list[Judgement]) -> str:
    """The claims table: claim and models, published and measured numbers, the verdict, what it needs next, why; the
    claims without a primary source in a table of their own."""
    out = []
    for heading, group in grouped(judgements):
        out += [f"**{heading}**", ""] if heading else []
        out += [_markdown_table(group), ""]
    return "\n".join(out).rstrip() + "\n"


def _markdown_table(judgements: list[Judgement]) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = [
        "| claim | models; metric | published | measured | verdict | needs next | why |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in as_rows(judgements):
        lines.append(
            "| "
            + " | ".join(cell(row[k]) for k in ("claim", "models", "published", "measured"))
            + f" | **{row['verdict']}**{cell(row['cell'].removeprefix(row['verdict']))} | {cell(row['needs'])} | "
            + f"{cell(row['why'])} |"
        )
    sources = dict.fromkeys(_source_line(j.claim) for j in judgements)
    return "\n".join([*lines, "", *(f"- {s}" for s in sources)])


def _source_line(claim: Claim) -> str:
    return claim.source + ("" if claim.primary else f": no primary source ({claim.unsourced})")


def render_latex(judgements: list[Judgement]) -> str:
    """The claims as a list (long text does not fit a tabular): verdict, claim, numbers, source, reason, next step."""
    out = [r"{\small\raggedright"]
    for heading, group in grouped(judgements):
        out += [rf"\paragraph{{{tex(heading)}}}"] if heading else []
        out += [r"\begin{itemize}", *(
            rf"\item \textbf{{{tex(row['verdict'])}}}{tex(row['cell'].removeprefix(row['verdict']))}: "
            rf"{tex(row['claim'])} ({tex(row['source'])}). {tex(row['models'])}; {tex(row['metric'])}. Published "
            rf"{tex(row['published'])}; measured {tex(row['measured'])}. {tex(row['why'])}. Needs next: "
            rf"{tex(row['needs'])}."
            for row in as_rows(group)), r"\end{itemize}"]
    return "\n".join([*out, "}"])


def verdict_counts(judgements: list[Judgement]) -> dict[str, int]:
    """How many claims got each verdict, in VERDICTS order."""
    return {v: sum(j.verdict == v for j in judgements) for v in VERDICTS}
