"""Figures a paper can put side by side: one look (colour, marker, line style) per model in every figure of a report,
whatever else is registered; one model's per-attack figure is one panel of overlaid attacks."""

from pathlib import Path

import pandas as pd
from matplotlib.colors import to_hex

from capsbench.models.external import register_alias
from capsbench.reporting.figures import accuracy_vs_cost, sweep_figure
from capsbench.reporting.frame import records_frame
from capsbench.reporting.palette import COLORS, model_look
from capsbench.suites import SUITES

SMOKE = Path(__file__).parent / "fixtures" / "smoke"


def figures(name: str, models: list[str] | None = None) -> list:
    suite = SUITES.get(name)
    frame = records_frame(pd.read_csv(SMOKE / f"{name}.csv").to_dict("records"), suite)
    if models is not None:
        frame = frame[frame["model"].isin(models)]
    return [f for spec in suite.layout.figures if (f := sweep_figure(frame, spec, suite)) is not None]


def looks(fig) -> dict[str, tuple[str, str, str]]:
    """Legend label -> (colour, marker, line style) of the series it names."""
    legend = fig.legends[0]
    return {text.get_text(): (to_hex(h.get_color()), h.get_marker(), h.get_linestyle())
            for h, text in zip(legend.legend_handles, legend.get_texts())}


def test_a_model_has_the_same_look_in_every_figure_of_a_report():
    drawn = [*figures("robustness"), *figures("affine"), *figures("routing")]
    points = pd.DataFrame([{"model": m, "cost": c, "mean": 99.0, "low": 98.0, "high": 99.5}
                           for m, c in (("capsnet", 5.0), ("cnn_sabour", 20.0), ("cnn_9x9", 8.0))])
    cost = accuracy_vs_cost(points, xlabel="MACs", ylabel="accuracy")
    seen: dict[str, set] = {}
    for fig in drawn:
        for label, look in looks(fig).items():
            seen.setdefault(label, set()).add(look)
    for line in cost.axes[0].lines:
        if line.get_label() in seen:
            seen[line.get_label()].add((to_hex(line.get_color()), line.get_marker(), "-"))
    assert {"capsnet", "cnn_sabour", "cnn_9x9", "effcapsnet"} <= set(seen)
    assert all(len(v) == 1 for v in seen.values()), seen  # one look per model across every figure
    assert len({next(iter(v))[0] for v in seen.values()}) == len(seen)  # and different models look different


def test_looks_do_not_depend_on_what_else_is_registered():
    before = model_look("mycaps"), model_look("capsnet")
    register_alias("zz_other_caps", "byo_models.plain:PlainNet", "test")
    assert (model_look("mycaps"), model_look("capsnet")) == before
    assert model_look("capsnet").color == COLORS[0]
    trained = model_look("capsnet (training=pgd)")
    assert trained.color == model_look("capsnet").color and trained.linestyle != model_look("capsnet").linestyle


def test_one_model_per_attack_figure_overlays_the_attacks_in_one_panel():
    worst, per_attack = figures("robustness", models=["capsnet"])
    assert len([ax for ax in per_attack.axes if ax.get_visible()]) == 1
    assert set(looks(per_attack)) == {"worst case", "PGD adaptive", "Vote", "PGD", "FGSM"}
    several = figures("robustness")[1]
    assert len([ax for ax in several.axes if ax.get_visible()]) > 1  # several models: a panel per attack
