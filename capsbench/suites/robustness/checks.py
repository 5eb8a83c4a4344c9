"""Gradient-masking sanity checks on one (model, dataset, seed)'s robustness records (Carlini et al., "On Evaluating
Adversarial Robustness", arXiv:1902.06705; Tramèr et al., arXiv:2002.08347): each returns whether it fired and why."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from capsbench.attacks import CATALOG, WORST_CASE
from capsbench.util.stats import ALPHA, decode_outcomes, mcnemar_p, paired_p

ADAPTIVE = ("pgd_adaptive", "vote")
MULTI_STEP = ("pgd", "pgd_adaptive", "apgd")  # iterative gradient attacks, which one FGSM step must never beat

CHECKS = {
    "eps0_equals_clean": "accuracy at eps=0 equals clean accuracy exactly",
    "pgd_not_weaker_than_fgsm": "iterative attacks (PGD, APGD, adaptive) never more accurate than FGSM at the same eps",
    "monotone_in_eps": "accuracy never increases with eps",
    "blackbox_not_stronger": "the black-box attack breaks no image the white-box attacks leave (or, reported alone, "
    "never beats the strongest white-box attack)",
    "near_zero_at_max_eps": "the strongest white-box attack reaches near-zero accuracy at the largest eps",
    "adaptive_stronger": "the capsule-adaptive attacks break no significant number of images the attacks before them "
    "leave (reported alone: PGD, else APGD, not significantly weaker than them; McNemar, p < 0.05)",
    "minimal_within_bound": "the minimum-norm attacks find, on every image the fixed-eps attacks broke at eps, a "
    "perturbation of at most eps (within 2 %)",
}


@dataclass(frozen=True)
class Flag:
    check: str
    fired: bool
    detail: str


def _curves(records: list[dict[str, Any]], metric: str = "robust_accuracy") -> dict[str, dict[float, dict[str, Any]]]:
    curves: dict[str, dict[float, dict[str, Any]]] = defaultdict(dict)
    for r in records:
        if r["metric"] == metric:
            curves[r["attack"]][float(r["eps"])] = r
    return curves


def _flag(check: str, problems: list[str]) -> Flag:
    return Flag(check, bool(problems), "; ".join(problems) if problems else "ok")


def _is_white_box(attack: str) -> bool:
    return attack in CATALOG and CATALOG.get(attack).white_box


def sanity_flags(records: list[dict[str, Any]], *, near_zero: float) -> list[Flag]:
    """Every check that applies to these records (accuracies in %); `near_zero` is the threshold in %."""
    (clean,) = [float(r["value"]) for r in records if r["metric"] == "clean_accuracy"]
    rows, marginal = _curves(records), _curves(records, "marginal_breaks")
    curves = {a: {e: float(r["value"]) for e, r in c.items()} for a, c in rows.items()}
    white = {a: c for a, c in curves.items() if _is_white_box(a)}
    black_alone = [a for a in curves if a in CATALOG and not CATALOG.get(a).white_box]
    if WORST_CASE in curves and not black_alone:  # the worst case without what black-box ensemble attacks added
        white[WORST_CASE] = {e: v + sum(float(r["value"]) for a, c in marginal.items() if not _is_white_box(a)
                                        for b, r in c.items() if b <= e) for e, v in curves[WORST_CASE].items()}
    flags = [
        _flag(
            "eps0_equals_clean",
            [
                f"{a} {c[0.0]:.2f} % at eps=0 vs clean {clean:.2f} %"
                for a, c in curves.items()
                if 0.0 in c and c[0.0] != clean
            ],
        )
    ]
    if "fgsm" in curves and set(MULTI_STEP) & set(curves):
        fgsm = curves["fgsm"]
        flags.append(
            _flag(
                "pgd_not_weaker_than_fgsm",
                [
                    f"{a} {c[e]:.2f} % > fgsm {fgsm[e]:.2f} % at eps={e:g}"
                    for a, c in curves.items()
                    if a in MULTI_STEP
                    for e in sorted(c)
                    if e in fgsm and c[e] > fgsm[e]
                ],
            )
        )
    flags.append(
        _flag(
            "monotone_in_eps",
            [
                f"{a} rises from {c[lo]:.2f} % at eps={lo:g} to {c[hi]:.2f} % at eps={hi:g}"
                for a, c in curves.items()
                for lo, hi in zip(sorted(c), sorted(c)[1:])
                if c[hi] > c[lo]
            ],
        )
    )
    for b in black_alone:
        problems = []
        for e, acc in sorted(curves[b].items()):
            rivals = {a: c[e] for a, c in white.items() if e in c and a != WORST_CASE}
            if rivals and acc < min(rivals.values()):
                best = min(rivals, key=rivals.get)
                problems.append(f"{b} {acc:.2f} % < {best} {rivals[best]:.2f} % at eps={e:g}")
        flags.append(_flag("blackbox_not_stronger", problems))
    for b in (a for a in marginal if a in CATALOG and not CATALOG.get(a).white_box):
        flags.append(_flag("blackbox_not_stronger", [
            f"{b} broke {_count(r)} image(s) the white-box attacks left robust at eps={e:g}"
            for e, r in sorted(marginal[b].items()) if _count(r)]))
    if white:
        top = max(max(c) for c in white.values())
        at_top = {a: c[top] for a, c in white.items() if top in c}
        best = min(at_top, key=at_top.get)
        flags.append(
            _flag(
                "near_zero_at_max_eps",
                [f"strongest white-box attack ({best}) leaves {at_top[best]:.2f} % at eps={top:g} (> {near_zero:g} %)"]
                if at_top[best] > near_zero
                else [],
            )
        )
    weak = [r for r in records if r["metric"] == "minimal_too_weak"]
    if weak:
        count = int(float(weak[0]["value"]))
        flags.append(_flag("minimal_within_bound", [
            f"the minimum-norm attacks found nothing within the fixed-eps bound on {count} image(s): their distances "
            "take the bound there"] if count else []))
    base = next((a for a in ("pgd", "apgd") if a in rows), None)
    if base is not None and set(ADAPTIVE) & set(rows):
        flags.append(_flag("adaptive_stronger", _adaptive_problems(rows, base)))
    elif set(ADAPTIVE) & set(marginal):
        flags.append(_flag("adaptive_stronger", [
            f"{a} broke {_count(r)} image(s) the attacks before it left robust at eps={e:g} (McNemar "
            f"p={mcnemar_p(_count(r), 0):.2g})"
            for a in ADAPTIVE if a in marginal for e, r in sorted(marginal[a].items())
            if mcnemar_p(_count(r), 0) < ALPHA]))
    return flags


def _count(record: dict[str, Any]) -> int:
    """The images a marginal-breaks record counts (its value is their share of n, in %)."""
    return round(float(record["value"]) * int(float(record["n"])) / 100)


def _adaptive_problems(rows: dict[str, dict[float, dict[str, Any]]], standard: str) -> list[str]:
    """Where an adaptive attack leaves significantly fewer images robust than the standard attack (PGD, else APGD)
    on the same images."""
    problems = []
    for attack in (a for a in ADAPTIVE if a in rows):
        for eps, rec in sorted(rows[attack].items()):
            base = rows[standard].get(eps)
            if base is None or eps == 0.0 or float(rec["value"]) >= float(base["value"]):
                continue
            n = int(float(rec["n"]))
            p = paired_p(decode_outcomes(rec["outcomes"], n), decode_outcomes(base["outcomes"], n))
            if p < ALPHA:
                problems.append(
                    f"{attack} {float(rec['value']):.2f} % < {standard} {float(base['value']):.2f} % at eps={eps:g} "
                    f"(n={n}, McNemar p={p:.2g})"
                )
    return problems
