"""The robustness suite's detection block (params.detection_fpr): reconstruction-based detection of adversarial inputs
for capsule models with a decoder (Qin et al., ICLR 2020, arXiv:1907.02957), evaluated against every attack already
run and adaptively, by pgd_detect_aware, which also minimises the reconstruction distance."""

from __future__ import annotations

from typing import Any

import numpy as np

from capsbench.attacks import WORST_CASE
from capsbench.attacks.detector import Detector, fit_detector
from capsbench.suites.robustness.phases import Planned
from capsbench.util.stats import accuracy_fields

DETECTION_AWARE = "pgd_detect_aware"


def fit(ctx: Any, run: Any) -> tuple[Detector | None, list[dict[str, Any]]]:
    """The detector for this model, its threshold set on clean validation images; or None and a skip record when the
    model has no decoder to detect with."""
    reason = run.why_not(DETECTION_AWARE, {"threshold": 1.0})  # any threshold: whether there is a decoder to evade
    if reason is not None:
        return None, [{"metric": "attack_skipped", "value": 1.0, "attack": DETECTION_AWARE, "reason": reason}]
    val = ctx.splits.val_x[: ctx.params.detection_val_images]
    return fit_detector(ctx.model, val, fpr=ctx.params.detection_fpr, batch_size=ctx.params.batch_size or 500), []


def detection_records(ctx: Any, run: Any, detector: Detector, grid: list[float]) -> list[dict[str, Any]]:
    """Threshold and clean false-positive rate; per attack reported alone and eps > 0 the detection rate among the
    images it broke and `correct_or_detected` (clean-correct and not broken, or its adversarial image flagged; a clean
    mistake counts only if flagged); then pgd_detect_aware's, and the per-image worst case over every attack run (the
    ensemble's too) and smaller eps."""
    batch = ctx.params.batch_size or 500
    flagged_clean = detector.flags(ctx.model, ctx.splits.test_x, batch_size=batch).numpy()  # (N,)
    wrong_detected = ~run.clean_ok & flagged_clean
    records: list[dict[str, Any]] = [
        {"metric": "detection_threshold", "value": detector.threshold, "n": detector.n},
        {"metric": "detection_false_positive_rate", **accuracy_fields(flagged_clean)},
    ]
    defended: dict[str, dict[float, np.ndarray]] = {}
    for name, per_eps in run.broken.items():
        for eps, broken in per_eps.items():
            if eps == 0:
                continue
            detected = detector.flags(ctx.model, run.adversarial[name][eps], batch_size=batch).numpy() & broken
            ok = (run.clean_ok & ~broken) | (broken & detected) | wrong_detected
            defended.setdefault(name, {})[eps] = ok
            records.append({"metric": "correct_or_detected", "attack": name, "eps": eps, **accuracy_fields(ok)})
            if broken.any():
                records.append({"metric": "detection_rate", "attack": name, "eps": eps,
                                **accuracy_fields(detected[broken])})
    run.run([Planned(DETECTION_AWARE, True, [e for e in grid if e > 0])],
            overrides={DETECTION_AWARE: {"threshold": detector.threshold}}, quiet=True)
    for eps, broken in run.quietly.get(DETECTION_AWARE, {}).items():
        ok = (run.clean_ok & ~broken) | wrong_detected
        defended.setdefault(DETECTION_AWARE, {})[eps] = ok
        records.append({"metric": "correct_or_detected", "attack": DETECTION_AWARE, "eps": eps,
                        **accuracy_fields(ok)})
    worst = np.ones_like(run.clean_ok)
    for eps in sorted(e for e in grid if e > 0):
        for per_eps in defended.values():
            if eps in per_eps:
                worst = worst & per_eps[eps]
        records.append({"metric": "correct_or_detected", "attack": WORST_CASE, "eps": eps,
                        **accuracy_fields(worst)})
    return records
