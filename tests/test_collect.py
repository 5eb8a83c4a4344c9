"""Combining invocations: filters, never mixing budgets/versions/settings, one value per seed, then mean/std/n."""

from datetime import datetime, timezone

import pandas as pd
import pytest

from capsbench.errors import CapsbenchError
from capsbench.reporting.collect import Invocation, Selection, check_comparable, combine, parse_when, select
from capsbench.reporting.frame import records_frame
from capsbench.reporting.tables import build_tables
from capsbench.suites.accuracy import AccuracySuite

ARGS = {"capsnet": {"routing_iterations": "3"}, "cnn_9x9": {"channels": "[8, 8, 4]"}}


def inv(run_id, day, *, budget="quick", version="0.1.0", params=None, model_args=None, suite="accuracy"):
    base = {"dataset": "mnist", "train.epochs": "3", "seeds": "[0, 1]", "output_dir": f"/tmp/{run_id}"}
    return Invocation(run_id, datetime(2026, 11, day, 12, tzinfo=timezone.utc), suite, budget, version,
                      {**base, **(params or {})}, model_args or ARGS)


def recs(values):
    """{(model, seed): accuracy} -> a records frame like records.csv."""
    return pd.DataFrame(
        [
            {"suite": "accuracy", "model": m, "dataset": "mnist", "seed": s, "metric": "test_accuracy", "value": v}
            for (m, s), v in values.items()
        ]
    )


def test_filters_select_by_suite_budget_dates_and_models():
    runs = [
        inv("a", 1),
        inv("b", 2, budget="smoke"),
        inv("c", 3, suite="robustness"),
        inv("d", 4, model_args={"cnn_9x9": {}}),
    ]
    assert [i.run_id for i in select(runs, Selection(suite="accuracy"))] == ["a", "b", "d"]
    assert [i.run_id for i in select(runs, Selection(budget="quick"))] == ["a", "c", "d"]
    since, until = parse_when("2026-11-02", "since"), parse_when("2026-11-03T23:00", "until")
    assert [i.run_id for i in select(runs, Selection(since=since, until=until))] == ["b", "c"]
    assert [i.run_id for i in select(runs, Selection(models=("capsnet",)))] == ["a", "b", "c"]
    with pytest.raises(CapsbenchError, match="since='yesterday' is not a date"):
        parse_when("yesterday", "since")


@pytest.mark.parametrize(
    "other, message",
    [
        (inv("b", 2, budget="smoke"), "runs of budgets quick, smoke; they are never mixed"),
        (inv("b", 2, version="0.2.0"), "runs of versions 0.1.0, 0.2.0; they are never mixed"),
        (inv("b", 2, params={"train.epochs": "5"}), "different settings (train.epochs)"),
        (inv("b", 2, model_args={"capsnet": {"routing_iterations": "1"}}), "model_args.capsnet.routing_iterations"),
    ],
)
def test_runs_that_differ_are_never_silently_mixed(other, message):
    with pytest.raises(CapsbenchError) as err:
        check_comparable([inv("a", 1), other])
    assert message in str(err.value)


def test_where_and_which_seeds_may_differ():
    check_comparable([inv("a", 1), inv("b", 2, params={"seeds": "[2, 3]", "output_dir": "/elsewhere"})])
    check_comparable([inv("a", 1), inv("b", 2, params={"remeasure": "True"})])  # measured again, the same way
    # a model left out by models= is not compared
    check_comparable(
        [inv("a", 1), inv("b", 2, model_args={"capsnet": {"routing_iterations": "1"}, **{"cnn_9x9": ARGS["cnn_9x9"]}})],
        models=("cnn_9x9",),
    )


def test_two_invocations_aggregate_over_distinct_seeds():
    first = recs({("capsnet", 0): 99.0, ("capsnet", 1): 98.0, ("cnn_9x9", 0): 97.0, ("cnn_9x9", 1): 96.0})
    second = recs({("capsnet", 2): 97.0, ("capsnet", 1): 10.0, ("cnn_9x9", 2): 95.0})  # seed 1 measured again
    runs = [inv("b", 2), inv("a", 1)]  # any order in, oldest wins first
    frame = combine(select(runs, Selection()), {"a": first, "b": second}, None)
    [table] = build_tables(records_frame(frame.to_dict("records"), AccuracySuite), AccuracySuite, AccuracySuite.layout)
    [key] = [h.key for h in table.headers if h.kind == "measured" and h.label == "accuracy"]
    cells = {row[-1]: table.cells[(i, key)] for i, row in enumerate(table.rows)}
    # capsnet: seeds 0, 1 (the later 10.0 replaces 98.0), 2 -> mean of 99, 10, 97
    assert cells["capsnet"].seeds == 3
    assert cells["capsnet"].mean == pytest.approx((99 + 10 + 97) / 3)
    assert cells["capsnet"].std == pytest.approx(pd.Series([99.0, 10.0, 97.0]).std())
    assert cells["cnn_9x9"].seeds == 3 and cells["cnn_9x9"].mean == pytest.approx(96.0)
    only = combine(select(runs, Selection()), {"a": first, "b": second}, ("cnn_9x9",))
    assert set(only["model"]) == {"cnn_9x9"}


def test_rows_keep_the_order_in_which_models_first_appeared():
    """A model measured again by a later invocation keeps its place (the table's row order)."""
    first = recs({("capsnet", 0): 99.0, ("cnn_9x9", 0): 97.0})
    again = recs({("capsnet", 0): 98.0})
    frame = combine([inv("a", 1), inv("b", 2)], {"a": first, "b": again}, None)
    assert list(frame["model"]) == ["capsnet", "cnn_9x9"] and list(frame["value"]) == [98.0, 97.0]


def test_a_model_trained_otherwise_joins_the_standard_runs_as_rows_of_its_own():
    """model_train.<m>.augment/adversarial runs combine with standard ones (their records carry `training`), but
    two runs of one model trained the same way must agree on every training setting."""
    pgd = {"model_train.capsnet.adversarial": "pgd", "model_train.capsnet.adv_eps": "0.3"}
    standard, trained = inv("a", 1), inv("b", 2, params=pgd)
    check_comparable([standard, trained])
    with pytest.raises(CapsbenchError, match=r"model_train.capsnet.adv_eps"):
        check_comparable([standard, trained, inv("c", 3, params={**pgd, "model_train.capsnet.adv_eps": "0.1"})])
    with pytest.raises(CapsbenchError, match=r"train.adversarial"):  # every model trained so: not a per-model row
        check_comparable([standard, inv("c", 3, params={"train.adversarial": "pgd"})])
    first = recs({("capsnet", 0): 99.0, ("cnn_9x9", 0): 97.0})
    second = recs({("capsnet", 0): 95.0}).assign(training="pgd")
    frame = combine([standard, trained], {"a": first, "b": second}, None)
    assert sorted(zip(frame["model"], frame["training"].fillna(""), frame["value"])) == [
        ("capsnet", "", 99.0),
        ("capsnet", "pgd", 95.0),
        ("cnn_9x9", "", 97.0),
    ]


def test_datasets_become_rows_and_model_args_compare_within_a_dataset():
    fashion = {"capsnet": {"routing_iterations": "3", "in_channels": "1", "image_size": "28"}}
    check_comparable(
        [
            inv("a", 1),
            inv("b", 2, params={"dataset": "fashion_mnist"}, model_args=fashion),
            inv("c", 3, params={"dataset": "fashion_mnist"}, model_args=fashion),
        ]
    )
    changed = {"capsnet": {**fashion["capsnet"], "routing_iterations": "1"}}
    with pytest.raises(CapsbenchError, match=r"runs b and c .*model_args.capsnet.routing_iterations"):
        check_comparable(
            [
                inv("a", 1),
                inv("b", 2, params={"dataset": "fashion_mnist"}, model_args=fashion),
                inv("c", 3, params={"dataset": "fashion_mnist"}, model_args=changed),
            ]
        )


def test_weights_files_are_where_not_what_but_two_weights_of_one_model_are_never_mixed():
    import pandas as pd

    from capsbench.reporting.collect import combine

    check_comparable([inv("a", 1, params={"weights.capsnet": "/here/w.pt", "register.mine": "pkg:Net"}), inv("b", 2)])
    records = {k: pd.DataFrame([{"suite": "accuracy", "model": "capsnet", "dataset": "mnist", "seed": seed,
                                  "metric": "test_accuracy", "value": 99.0, "weights_sha256": sha}])
               for k, seed, sha in (("a", 0, "1" * 64), ("b", 1, "2" * 64))}
    with pytest.raises(CapsbenchError, match="model 'capsnet' was measured with 2 different weights"):
        combine([inv("a", 1), inv("b", 2)], records, None)
