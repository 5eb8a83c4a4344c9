"""Which tracked invocations a report may combine: filters, readable records, the no-silent-mixing checks (budget,
capsbench version, code, settings, one set of weights per model), one value per seed, and each suite's newest run with
the older ones measured alike."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timezone

import pandas as pd

from capsbench.errors import CapsbenchError
from capsbench.reporting.frame import WEIGHTS
from capsbench.tracking import UNTAGGED, Invocation, UnreadableRecords, read_records

log = logging.getLogger(__name__)

# Parent-run params that say where or how a run happened, not what it measured: they may differ between
# invocations whose numbers are combined (datasets become separate rows). Everything else (train.*, data.*,
# params.*, ...) must agree.
NEUTRAL_PARAMS = (
    "dataset",
    "seeds",
    "models",
    "output_dir",
    "cache_dir",
    "retrain",
    "remeasure",
    "device",
    "data.root",
    "data.download",
    "launcher",
)
# model_args: compared per model from the nested runs instead; weights.<model> (a file's path) and register.<alias> (a
# class's import path): the records name the weights by the hash of their tensors, compared per model (combine), so a
# module given to capsbench.evaluate and its saved file are the same weights; ray./slurm.: how units were launched
NEUTRAL_PREFIXES = ("tracking.", "model_args.", "weights.", "register.", "ray.", "slurm.")
# model_train.<model>.<key> with these key prefixes train a model adversarially or augmented: its records then carry
# a `training` column and form rows of their own, so such runs combine with standard ones (compared per protocol).
TRAINING_KEYS = ("adversarial", "adv_", "augment", "affine_")


@dataclass(frozen=True)
class Selection:
    """Report filters; None means no filter. Dates compare with the run's start time (UTC)."""

    suite: str | None = None
    models: tuple[str, ...] | None = None
    dataset: str | None = None
    budget: str | None = None
    version: str | None = None
    code: str | None = None  # a prefix of the code hash of capsbench (tag code.hash) or of an external model's source
    since: datetime | None = None
    until: datetime | None = None


def parse_when(text: str | None, key: str) -> datetime | None:
    """'2026-11-21' or '2026-11-21T13:00' (UTC unless an offset is given) -> aware datetime."""
    if text is None:
        return None
    try:
        when = datetime.fromisoformat(str(text))
    except ValueError:
        raise CapsbenchError(
            f"{key}={text!r} is not a date; expected ISO form such as 2026-11-21 or 2026-11-21T13:00"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def select(invocations: list[Invocation], sel: Selection) -> list[Invocation]:
    """The invocations passing every filter, oldest first."""
    keep = [
        inv
        for inv in invocations
        if (sel.suite is None or inv.suite == sel.suite)
        and (sel.dataset is None or inv.dataset == sel.dataset)
        and (sel.budget is None or inv.budget == sel.budget)
        and (sel.version is None or inv.version == sel.version)
        and (sel.code is None or any(c.startswith(sel.code) for c in (inv.code, *inv.model_code.values())))
        and (sel.since is None or inv.start >= sel.since)
        and (sel.until is None or inv.start <= sel.until)
        and (sel.models is None or bool(set(sel.models) & set(inv.model_args)))
    ]
    return sorted(keep, key=lambda inv: inv.start)


def readable_records(uri: str, invocations: list[Invocation]) -> dict[str, pd.DataFrame]:
    """The records of each invocation by run id; a run whose records.csv artifact is missing or corrupt is named in a
    warning and left out."""
    out = {}
    for inv in invocations:
        try:
            out[inv.run_id] = read_records(uri, inv.run_id, inv.records_sha256)
        except UnreadableRecords as exc:
            log.warning("skipping run %s (%s of %s): %s", inv.run_id, inv.suite,
                        inv.start.isoformat(timespec="seconds"), exc)
    return out


def check_comparable(invocations: list[Invocation], models: tuple[str, ...] | None = None) -> None:
    """Refuse to combine runs of one suite that differ in budget, capsbench version, code or measuring config
    (model arguments compared for the selected models only)."""
    for attr, key in (("budget", "budget"), ("version", "version")):
        values = sorted({getattr(inv, attr) for inv in invocations})
        if len(values) > 1:
            raise CapsbenchError(
                f"suite {invocations[0].suite!r} has runs of {attr}s {', '.join(values)}; they are never mixed "
                f"in one table: choose one with {key}={values[-1]} (or narrow the dates with since=/until=)"
            )
    codes = {inv.code: inv for inv in invocations}  # each code version with its latest run
    if len(codes) > 1:
        named = "; ".join(f"{_code_label(code)} (commit {_short(inv.commit)}, latest run {inv.start:%Y-%m-%d %H:%M})"
                          for code, inv in codes.items())
        latest = invocations[-1].code
        pick = "" if latest.startswith(UNTAGGED) else f"choose one with code={latest[:12]} (or "
        raise CapsbenchError(
            f"suite {invocations[0].suite!r} has runs measured by {len(codes)} versions of the code: {named}; their "
            f"numbers are never mixed in one table: {pick}narrow the dates with since=/until={')' if pick else ''}"
        )
    _check_model_code(invocations, models)
    first = invocations[0]
    for inv in invocations[1:]:
        a, b = protocol_params(first), protocol_params(inv)
        _refuse(first, inv, sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k)))
        ref = next(i for i in invocations if i.dataset == inv.dataset)  # model args depend on the dataset
        diff = []
        for model in sorted(set(ref.model_args) & set(inv.model_args) & set(models or inv.model_args)):
            a, b = ref.model_args[model], inv.model_args[model]
            diff += sorted(f"model_args.{model}.{k}" for k in set(a) | set(b) if a.get(k) != b.get(k))
        _refuse(ref, inv, diff)
        for model in sorted(set(inv.model_args) & set(models or inv.model_args)):  # the same rows: trained alike
            same = next(i for i in invocations if model in i.model_args and training(i, model) == training(inv, model))
            a, b = _training_params(same, model), _training_params(inv, model)
            _refuse(same, inv, sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k)))


def _check_model_code(invocations: list[Invocation], models: tuple[str, ...] | None) -> None:
    """Refuse to combine runs that measured an external model with different versions of its source (tags
    code.model.<alias>), naming the versions; code=<hash> picks one."""
    tagged = sorted({m for inv in invocations for m in inv.model_code} & set(models or _every_model(invocations)))
    for model in tagged:
        measured = [inv for inv in invocations if model in inv.model_code or model in inv.model_args]  # oldest first
        versions = {inv.model_code.get(model, "untagged"): inv for inv in measured}  # each with its latest run
        if len(versions) < 2:
            continue
        named = "; ".join(f"{code[:12]} (latest run {inv.start:%Y-%m-%d %H:%M})" for code, inv in versions.items())
        latest = measured[-1].model_code.get(model, "untagged")
        target = measured[-1].params.get(f"register.{model}")
        pick = f"choose one with code={latest[:12]} (or " if latest != "untagged" else ""
        which = f"model {model!r}" + (f" ({target})" if target else "")
        raise CapsbenchError(
            f"suite {invocations[0].suite!r}: {which} was measured with {len(versions)} versions of its source: "
            f"{named}; their numbers are never mixed in one table: {pick}narrow the dates with since=/until=, or "
            f"leave it out with models=[...]{')' if pick else ''}"
        )


def _every_model(invocations: list[Invocation]) -> set[str]:
    return {m for inv in invocations for m in (*inv.model_args, *inv.model_code)}


def newest_alike(invocations: list[Invocation], models: tuple[str, ...] | None = None) -> list[Invocation]:
    """The newest invocation and every older one that can share its table (oldest first); the others are named in a
    log line (latest=true)."""
    kept: list[Invocation] = []
    for inv in sorted(invocations, key=lambda i: i.start, reverse=True):
        try:
            check_comparable([*reversed(kept), inv] if kept else [inv], models)
        except CapsbenchError as exc:
            log.info("latest=true: run %s of %s left out (%s)", inv.run_id, inv.start.isoformat(timespec="seconds"),
                     str(exc).split(" measured ")[-1][:200])
            continue
        kept.append(inv)
    return sorted(kept, key=lambda i: i.start)


def _code_label(code: str) -> str:
    """A code hash as 12 hex digits; "untagged" for runs logged before runs carried one (told apart by commit)."""
    return "untagged" if code.startswith(UNTAGGED) else code[:12]


def _short(commit: str) -> str:
    """A git commit as 12 hex digits, "+dirty" kept."""
    sha, plus, rest = commit.partition("+")
    return sha[:12] + plus + rest


def _refuse(a: Invocation, b: Invocation, diff: list[str]) -> None:
    if diff:
        raise CapsbenchError(
            f"suite {a.suite!r}: runs {a.run_id} and {b.run_id} measured under different settings "
            f"({', '.join(diff[:6])}{', ...' if len(diff) > 6 else ''}); their numbers cannot share a table: "
            "narrow the selection with since=/until=, models= or dataset="
        )


def protocol_params(inv: Invocation) -> dict[str, str]:
    """The params of an invocation that must agree with another's for their numbers to share a table."""
    return {
        k: v
        for k, v in inv.params.items()
        if k not in NEUTRAL_PARAMS and not k.startswith(NEUTRAL_PREFIXES) and not _is_training_key(k)
    }


def training(inv: Invocation, model: str) -> str:
    """The `training` column `model`'s records carry in this invocation ("pgd", "affine", "pgd+affine", or "")."""
    values = (
        inv.params.get(f"model_train.{model}.{key}", inv.params.get(f"train.{key}"))
        for key in ("adversarial", "augment")
    )
    return "+".join(v for v in values if v not in (None, "None", ""))


def _training_params(inv: Invocation, model: str) -> dict[str, str]:
    return {k: v for k, v in inv.params.items() if k.startswith(f"model_train.{model}.") and _is_training_key(k)}


def _is_training_key(key: str) -> bool:
    parts = key.split(".", 2)
    return len(parts) == 3 and parts[0] == "model_train" and parts[2].startswith(TRAINING_KEYS)


def combine(
    invocations: list[Invocation], records: dict[str, pd.DataFrame], models: tuple[str, ...] | None
) -> pd.DataFrame:
    """Records of all invocations, one invocation per (model, training, dataset, seed): a seed measured again in a
    later invocation replaces the earlier one, so n counts distinct seeds, never repeats of a seed."""
    latest: dict[tuple[str, str, str, int], str] = {}
    keys = {inv.run_id: _row_keys(records[inv.run_id]) for inv in invocations}
    for inv in invocations:  # oldest first: later invocations overwrite
        for key in dict.fromkeys(keys[inv.run_id]):
            if key in latest:
                log.info(
                    "%s seed %s: using run %s, measured again after run %s", key[0], key[3], inv.run_id, latest[key]
                )
            latest[key] = inv.run_id
    parts = []
    for inv in invocations:
        owner = [latest[key] == inv.run_id for key in keys[inv.run_id]]
        parts.append(records[inv.run_id][owner])
    out = pd.concat(parts, ignore_index=True)
    first_seen = {
        m: i for i, m in enumerate(dict.fromkeys(m for inv in invocations for m in records[inv.run_id]["model"]))
    }
    out = out.sort_values("model", key=lambda col: col.map(first_seen), kind="stable").reset_index(drop=True)
    out = out if models is None else out[out["model"].isin(models)].reset_index(drop=True)
    _check_weights(out, invocations[0].suite)
    return out


def _check_weights(records: pd.DataFrame, suite: str) -> None:
    """One set of weights per model measured with weights trained elsewhere (by the hash of their tensors)."""
    if WEIGHTS not in records:
        return
    for model, part in records.dropna(subset=[WEIGHTS]).groupby("model", sort=False):
        shas = sorted(set(part[WEIGHTS]))
        if len(shas) > 1:
            raise CapsbenchError(
                f"suite {suite!r}: model {model!r} was measured with {len(shas)} different weights (sha256 "
                f"{', '.join(s[:12] for s in shas)}); their numbers cannot share a table: narrow the selection with "
                "since=/until= or latest=true"
            )


def _row_keys(frame: pd.DataFrame) -> list[tuple[str, str, str, int]]:
    """(model, training, dataset, seed) per record; training is "" for standard training."""
    trained = frame["training"].fillna("").astype(str) if "training" in frame else pd.Series("", index=frame.index)
    return list(zip(frame["model"], trained, frame["dataset"], frame["seed"]))
