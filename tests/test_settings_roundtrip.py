"""What a later command needs from a run comes back typed: the resolved config a run logs as config.yaml, not MLflow's
string params ("None" is not null, "0.003" is not a number)."""

from composing import compose

from capsbench.config.compose import to_dict
from capsbench.reporting.report import suite_params
from capsbench.tracking import read_config, read_invocations


def test_every_setting_type_reads_back_identical(tracked_store):
    uri, out, _ = tracked_store
    (first, *_) = read_invocations(uri, "capsbench")
    logged = read_config(uri, first.run_id)
    expected = to_dict(compose(["suite=accuracy", "budget=smoke", f"output_dir={out}", f"tracking.uri={uri}",
                                "train.epochs=1", "device=cpu", f"seeds={logged['seeds']}",
                                "models=[capsnet,cnn_sabour]"]))
    assert isinstance(logged["threads"], int)  # resolved by the driver: the number each unit ran with
    assert {k: v for k, v in logged.items() if k != "threads"} == {k: v for k, v in expected.items() if k != "threads"}
    assert logged["data"]["test_subset"] == 500 and logged["train"]["lr_milestones"] is None  # int, null
    assert isinstance(logged["train"]["lr"], float) and isinstance(logged["seeds"], list)  # float, list
    assert isinstance(logged["model_args"]["capsnet"]["decoder_hidden"], list)  # nested
    assert first.params["train.lr_milestones"] == "None"  # what MLflow's params alone would give back


def test_the_report_reads_the_suite_params_typed():
    params = suite_params("robustness", {"attack_args": {"apgd_targeted": {"targets": None}, "apgd": {"steps": 25}},
                                         "eps": {"mnist": [0.0, 0.1]}, "batch_size": None})
    assert params.attack_args.apgd_targeted.targets is None and params.attack_args.apgd.steps == 25
    assert params.batch_size is None and list(params.eps.mnist) == [0.0, 0.1] and params.examples == 8
