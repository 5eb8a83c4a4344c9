"""A model card per model and run, as RobustBench's entries carry: which model (its arguments) and weights (their
checkpoint keys and hashes), which code (commit and hash), device and budget, the threat model and each attack's
budget (and why any did not run), the sanity checks and their outcomes, which test images, and the headline values
with their intervals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from capsbench.reporting.frame import DRAW_COLUMNS
from capsbench.reporting.headline import headline_values
from capsbench.util.atomic import write_text
from capsbench.util.version import __version__

ATTACK_METRICS = ("robust_accuracy", "marginal_breaks")  # records that say an attack ran
NOT_AN_ATTACK = ("worst_case",)


def model_card(model: str, records: list[dict[str, Any]], suite: Any, *, budget: str, code_hash: str,
               weights: dict[int, str], run: dict[str, Any] | None = None) -> dict[str, Any]:
    """The card of `model` from its records in one run; `weights`: seed -> SHA-256 of the measured weights' tensors;
    `run`: what the run knows beside the records (model_args, checkpoint keys per seed, device, commit, the suite's
    own details such as the threat model and each attack's budget)."""
    mine = [r for r in records if r["model"] == model]
    ran = sorted({r["attack"] for r in mine if r["metric"] in ATTACK_METRICS and r.get("attack")} - set(NOT_AN_ATTACK))
    skipped = {r["attack"]: r.get("reason", "") for r in mine if r["metric"] == "attack_skipped"}
    draws = {tuple(r.get(c) for c in DRAW_COLUMNS) for r in mine if r.get(DRAW_COLUMNS[0])}
    checks = {}
    for r in mine:
        if r["metric"] == "sanity_flag":
            checks.setdefault(r["check"], {})[str(r["seed"])] = "fired" if float(r["value"]) else "passed"
    return {
        "model": model,
        "suite": suite.name,
        "dataset": sorted({r["dataset"] for r in mine}),
        "budget": budget,
        "seeds": sorted({int(r["seed"]) for r in mine}),
        "weights_sha256": {str(seed): sha for seed, sha in sorted(weights.items())},
        "capsbench": __version__,
        "code_hash": code_hash,
        "attacks": {**{a: "run" for a in ran}, **{a: f"not run: {why}" for a, why in skipped.items()}},
        "n": max((int(r["n"]) for r in mine if r.get("n") is not None), default=0),
        "test_images": [dict(zip(DRAW_COLUMNS, d)) for d in sorted(draws, key=str)],
        **({"sanity_checks": checks} if checks else {}),
        **(run or {}),
        "values": headline_values(mine, suite),
    }


def write_model_cards(folder: Path, records: list[dict[str, Any]], suite: Any, *, budget: str, code_hash: str,
                      weights: dict[str, dict[int, str]], runs: dict[str, dict[str, Any]] | None = None) -> list[Path]:
    """<folder>/<model>.json for every model of the records; `weights`: model -> seed -> tensors' SHA-256; `runs`:
    model -> model_card's `run`."""
    paths = []
    for model in sorted({r["model"] for r in records}):
        card = model_card(model, records, suite, budget=budget, code_hash=code_hash, weights=weights.get(model, {}),
                          run=(runs or {}).get(model))
        paths.append(folder / f"{model}.json")
        write_text(paths[-1], json.dumps(card, indent=1, default=str) + "\n")
    return paths
