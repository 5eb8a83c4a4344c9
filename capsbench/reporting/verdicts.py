"""Verdicts on published claims from records: supported, refuted (significant the other way), not resolved at this
budget / n, or no records. Paired McNemar on per-image outcomes where both models share the test images, else
Welch's t-test across seeds (on log values for a ratio claim), else a strict difference for exact counts."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from capsbench.reporting.baselines import logged_text
from capsbench.reporting.claim_files import Claim, Side
from capsbench.reporting.frame import UNDERTRAINED, row_models, same_value
from capsbench.reporting.latex import tex
from capsbench.suites import SUITES
from capsbench.util.stats import ALPHA, decode_outcomes, paired_p, welch_p

SUPPORTED, REFUTED, UNRESOLVED, NO_RECORDS = "supported", "refuted", "not resolved", "no records"


@dataclass(frozen=True)
class Evidence:
    """What the records hold for one side of a claim: value per seed, per-image outcomes per seed, images."""

    values: dict[int, float]
    outcomes: dict[int, np.ndarray]
    images: int | None
    interval: tuple[float, float] | None  # one seed: its 95 % Wilson interval

    @property
    def mean(self) -> float:
        return float(np.mean(list(self.values.values())))

    @property
    def std(self) -> float | None:
        return float(np.std(list(self.values.values()), ddof=1)) if len(self.values) > 1 else None


@dataclass(frozen=True)
class Judgement:
    claim: Claim
    verdict: str
    reason: str  # the test and its p-value, or what is missing and what would resolve it
    better: Evidence | None = None
    worse: Evidence | None = None
    p: float | None = None


@dataclass(frozen=True)
class Run:
    """The records of one suite in the report and how they were measured."""

    frame: pd.DataFrame
    model_args: dict[str, dict[str, str]]  # model -> constructor arguments as logged
    settings: dict[str, str]  # train.*, data.*, params.* as logged
    budget: str


def judge(claim: Claim, run: Run | None) -> Judgement:
    """The claim's verdict from `run` (None: the report has no records of the claim's suite)."""
    if run is None:
        return Judgement(
            claim, NO_RECORDS, f"no {claim.suite} records in this report (capsbench run suite={claim.suite})"
        )
    sides = []
    for side in (claim.better, claim.worse):
        found = _evidence(claim, side, run)
        if isinstance(found, str):
            return Judgement(claim, NO_RECORDS if found.startswith("no ") else UNRESOLVED, found)
        sides.append(found)
    better, worse = sides
    test, p, lead = _test(claim, run.budget, better, worse)
    if p is None:
        return Judgement(claim, UNRESOLVED, test, better, worse)
    if p < ALPHA and lead != 0:
        return Judgement(claim, SUPPORTED if lead > 0 else REFUTED, f"{test}, p = {p:.2g}", better, worse, p)
    more = "more seeds" if run.budget == "paper" else "budget=paper (the full test set) or more seeds"
    return Judgement(
        claim,
        UNRESOLVED,
        f"{test}, p = {p:.2g} >= {ALPHA} at budget={run.budget}, {_size(better, worse)}; {more} may resolve it",
        better,
        worse,
        p,
    )


def _evidence(claim: Claim, side: Side, run: Run) -> Evidence | str:
    """The side's records, or why there are none that stand for it."""
    f, metric = run.frame, side.metric or claim.metric
    rows = f[(f["model"] == side.model) & (f["dataset"] == claim.dataset) & (f["metric"] == metric)]
    row_name = side.model + (f" (training={side.training})" if side.training else "")
    rows = rows[row_models(rows) == row_name]  # standard training unless the side names its protocol
    for col, value in claim.sweep.items():
        rows = rows[rows[col].map(lambda v, want=value: same_value(v, want))] if col in rows else rows.iloc[0:0]
    if rows.empty:
        return f"no records of {row_name} ({claim.dataset}, {metric}{_where(claim)})"
    logged = run.model_args.get(side.model, {})
    wrong = {k: logged.get(k) for k, v in side.model_args.items() if logged.get(k) != logged_text(v)}
    wrong |= {k: run.settings.get(k) for k, v in side.settings.items() if run.settings.get(k) != logged_text(v)}
    if wrong:
        return f"no records of {side.label}: measured with " + ", ".join(f"{k}={v}" for k, v in wrong.items())
    if UNDERTRAINED in rows and rows[UNDERTRAINED].fillna(False).astype(bool).any():
        return (
            f"{side.model} is undertrained (below its dataset's validation floor); train longer (budget=quick or paper)"
        )
    if rows["seed"].duplicated().any():
        return f"several {side.model} records per seed; name the sweep values that pick one in the claim's sweep"
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
    return Evidence(values, outcomes, images, interval)


def _test(claim: Claim, budget: str, better: Evidence, worse: Evidence) -> tuple[str, float | None, float]:
    """(test, p-value or None where none applies, the claimed side's lead: > 0 in the claimed direction)."""
    metric = next(m for m in SUITES.get(claim.suite).metrics if m.name == claim.metric)  # checked when loaded
    sign = 1.0 if metric.higher_is_better else -1.0
    if claim.ratio is not None:  # log advantage against log(ratio)
        if min(better.values.values()) <= 0 or min(worse.values.values()) <= 0:
            return "a ratio needs positive values", None, 0.0
        a = [sign * math.log(v) for v in better.values.values()]
        b = [sign * math.log(v) + math.log(claim.ratio) for v in worse.values.values()]
        name = f"advantage of at least {claim.ratio:g}x"
    else:
        a = [sign * v for v in better.values.values()]
        b = [sign * v for v in worse.values.values()]
        common = sorted(set(better.outcomes) & set(worse.outcomes))
        if common and all(len(better.outcomes[s]) == len(worse.outcomes[s]) for s in common):
            oa = np.concatenate([better.outcomes[s] for s in common])
            ob = np.concatenate([worse.outcomes[s] for s in common])
            lead = sign * (np.mean([better.values[s] for s in common]) - np.mean([worse.values[s] for s in common]))
            return f"paired McNemar on {len(oa):,} shared test images", paired_p(oa, ob), float(lead)
        name = "difference"
    lead = float(np.mean(a) - np.mean(b))
    if len(a) >= 2 and len(b) >= 2:
        return f"Welch's t-test across seeds ({name})", welch_p(a, b), lead
    if metric.exact:
        return f"exact count ({name})", 0.0, lead
    return (
        (
            f"not testable at budget={budget}: one seed and no shared per-image outcomes; "
            "run seeds=[0,1,2] (Welch across seeds)"
        ),
        None,
        lead,
    )


def _size(better: Evidence, worse: Evidence) -> str:
    images = {e.images for e in (better, worse) if e.images}
    seeds = min(len(better.values), len(worse.values))
    return (f"n = {max(images):,} images, " if images else "") + f"{seeds} seed(s)"


def _where(claim: Claim) -> str:
    return "".join(f", {k}={v}" for k, v in claim.sweep.items())


def judge_all(claims: list[Claim], runs: dict[str, Run]) -> list[Judgement]:
    """Every claim's verdict; `runs` maps a suite name to its records in the report."""
    return [judge(c, runs.get(c.suite)) for c in claims]


def describe(e: Evidence | None) -> str:
    """A measured value as text: mean ± std over seeds, or the one seed's value [95 % interval]."""
    if e is None:
        return "–"
    if e.std is not None:
        return f"{e.mean:.4g} ± {e.std:.2g} (n={len(e.values)} seeds)"
    text = f"{e.mean:.4g}"
    return (
        text
        + (f" [{e.interval[0]:.1f}, {e.interval[1]:.1f}]" if e.interval else "")
        + (f" (n={e.images:,})" if e.images else "")
    )


def as_rows(judgements: list[Judgement]) -> list[dict[str, Any]]:
    """One row per claim, the columns every renderer shows."""
    return [
        {
            "claim": j.claim.statement,
            "source": f"{j.claim.source}, {j.claim.where}",
            "published": " vs ".join(
                "–" if s.published is None else f"{s.published:g}" for s in (j.claim.better, j.claim.worse)
            ),
            "measured": f"{describe(j.better)} vs {describe(j.worse)}",
            "verdict": j.verdict,
            "why": j.reason + (f"; note: {j.claim.note}" if j.claim.note else ""),
            "models": f"{j.claim.better.label} vs {j.claim.worse.label}",
            "metric": j.claim.metric + _where(j.claim),
        }
        for j in judgements
    ]


RULE = (
    f"Verdict rule: a claim that model A beats model B is supported when A is better in the claimed direction "
    f"(each metric's higher_is_better) with p < {ALPHA}, refuted when B is better with p < {ALPHA}, and not "
    "resolved otherwise. The test is paired McNemar on the per-image outcomes when both models were measured on "
    "the same test images, else Welch's t-test across seeds (at least two each), else, for exact counts such as "
    'parameters, the difference itself; a claimed factor ("10x slower") is tested on log values against the '
    "log of the factor. Undertrained models are never judged; a model measured with other arguments or "
    "settings than the claim names has no records for it. A verdict is about the models as measured: below "
    "budget=paper they are narrower and trained far less than the papers' models, so a verdict there says "
    "whether the claim holds for them, not whether the published number is right."
)


def render_markdown(judgements: list[Judgement]) -> str:
    """The claims table: claim and source, published and measured numbers, the verdict and why."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = ["| claim | models; metric | published | measured | verdict | why |", "|---|---|---|---|---|---|"]
    for row in as_rows(judgements):
        lines.append(
            "| "
            + " | ".join(cell(row[k]) for k in ("claim", "models", "published", "measured"))
            + f" | **{row['verdict']}** | {cell(row['why'])} |"
        )
    sources = dict.fromkeys(j.claim.source for j in judgements)
    return "\n".join([*lines, "", *(f"- {s}" for s in sources)]) + "\n"


def render_latex(judgements: list[Judgement]) -> str:
    """The claims as a list (long text does not fit a tabular): verdict, claim, numbers, source and reason."""
    items = [
        rf"\item \textbf{{{tex(row['verdict'])}}}: {tex(row['claim'])} ({tex(row['source'])}). "
        rf"{tex(row['models'])}; {tex(row['metric'])}. Published {tex(row['published'])}; measured "
        rf"{tex(row['measured'])}. {tex(row['why'])}."
        for row in as_rows(judgements)
    ]
    return "\n".join([r"{\small\raggedright", r"\begin{itemize}", *items, r"\end{itemize}", "}"])
