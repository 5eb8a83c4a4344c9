"""The robustness suites' tables and figures, one layout per threat model: the per-image worst case with the masking
flags, each attack alone, the ensemble's marginal breaks, detection; robust accuracy against eps."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from capsbench.attacks import WORST_CASE, labels, table_order
from capsbench.suites.layout import Column, FlagColumn, Group, Layout, SweepColumns, SweepPlot, TableSpec
from capsbench.suites.robustness.checks import CHECKS

FLAG_SYMBOLS = {"eps0_equals_clean": "0", "pgd_not_weaker_than_fgsm": "F", "monotone_in_eps": "M",
                "blackbox_not_stronger": "B", "near_zero_at_max_eps": "Z", "adaptive_stronger": "A",
                "minimal_within_bound": "W"}


class _Declared(Sequence, Mapping):
    """The attacks' declared table order (as a sequence) and labels (as a mapping), then `extra` values of the attack
    column, read from the catalog whenever a table is drawn, so that an attack registered after this module was
    imported is placed and named too."""

    def __init__(self, extra: Mapping[str, str] | None = None) -> None:
        self.extra = dict(extra or {})

    def _order(self) -> list[str]:
        return [*table_order(), *self.extra]

    def __getitem__(self, key: Any) -> Any:
        return self._order()[key] if isinstance(key, (int, slice)) else {**labels(), **self.extra}[key]

    def __len__(self) -> int:
        return len(self._order())

    def __iter__(self) -> Iterator[str]:
        return iter(self._order())

    def __contains__(self, key: object) -> bool:
        return key in labels() or key in self.extra


ATTACKS_SHOWN = Group("attack", _Declared(), _Declared())  # type: ignore[arg-type]
FIXED_EPS = {"fixed_eps": "fixed-eps attacks"}  # minimal_found's row for the fixed-eps attacks' bound
EPS_COLUMNS = SweepColumns("robust_accuracy", "eps", "robust accuracy ({unit}) at eps", drop=(0.0,))  # eps 0 = clean


def robustness_layout(words: str) -> Layout:
    """The layout of a robustness suite whose threat model is `words` ("L-inf", "L2")."""
    return Layout(
        tables=(
            TableSpec(
                "worst_case",
                f"Robust accuracy under the per-image worst case over all attacks ({words})",
                (
                    Column("clean_accuracy", "clean"),
                    replace(EPS_COLUMNS, where={"attack": WORST_CASE}),
                    FlagColumn("sanity_flag", "check", FLAG_SYMBOLS, CHECKS),
                ),
            ),
            TableSpec(
                "attacks",
                f"Robust accuracy per attack ({words})",
                (replace(EPS_COLUMNS, compare=False),),  # no attack alone is the worst case: nothing bold here
                blocks=ATTACKS_SHOWN,
                drop={"attack": (WORST_CASE,)},
            ),
            TableSpec(
                "ensemble",
                f"Test images each ensemble attack broke that every attack before it left robust ({words})",
                (SweepColumns("marginal_breaks", "eps", "newly broken ({unit}) at eps", drop=(0.0,), compare=False),),
                blocks=ATTACKS_SHOWN,
            ),
            TableSpec(
                "detection",
                f"Correct or flagged by the reconstruction detector under attack ({words})",
                (
                    Column("detection_false_positive_rate", "clean flagged"),
                    SweepColumns("correct_or_detected", "eps", "correct or detected ({unit}) at eps"),
                ),
                blocks=ATTACKS_SHOWN,
            ),
            TableSpec(
                "minimal",
                f"Each test image's smallest adversarial perturbation ({words}): the median over the images",
                (Column("minimal_distance", "median smallest perturbation"),),
                keep={"attack": (WORST_CASE,)},
            ),
            TableSpec(
                "minimal_found",
                f"Which attack found each image's smallest perturbation ({words})",
                (Column("minimal_found", "found the smallest", compare=False),),
                blocks=Group("attack", _Declared(FIXED_EPS), _Declared(FIXED_EPS)),  # type: ignore[arg-type]
            ),
        ),
        figures=(
            SweepPlot(
                "worst_case_vs_eps",
                ("robust_accuracy",),
                "eps",
                keep={"attack": (WORST_CASE,)},
                xlabel=f"eps ({words}, pixels in [0, 1])",
                ylabels=("worst-case robust accuracy (%)",),
            ),
            SweepPlot(
                "robustness_curve",
                ("minimal_accuracy",),
                "eps",
                xlabel=f"radius ({words}, pixels in [0, 1])",
                ylabels=("accuracy within the radius (%)",),
            ),
            SweepPlot(
                "robust_accuracy_vs_eps",
                ("robust_accuracy",),
                "eps",
                facet=ATTACKS_SHOWN,
                drop={"attack": ("square",)},
                xlabel="eps",
                ylabels=("robust accuracy (%)",),
            ),
        ),
    )
