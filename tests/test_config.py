"""Config composition: precedence, validation errors that name the fix, CLI exit status 2 with nothing written."""

import pytest
from composing import compose
from typer.testing import CliRunner

from capsbench.cli import app
from capsbench.config.per_model import model_trains
from capsbench.errors import CapsbenchError


def test_precedence_defaults_budget_suite_cli(tmp_path):
    quick = compose(["suite=accuracy", f"output_dir={tmp_path}"])
    assert quick.budget == "quick" and quick.train.epochs == 4  # budget file beats the dataclass default (10)
    assert quick.model_args.capsnet.conv_channels == 32
    cli = compose(["suite=accuracy", "budget=smoke", "train.epochs=7", "seeds=[3,4]", f"output_dir={tmp_path}"])
    assert cli.train.epochs == 7 and list(cli.seeds) == [3, 4]
    assert cli.data.train_subset == 3000  # from the smoke budget


def test_model_train_overrides_only_its_model(tmp_path):
    cfg = compose(["suite=accuracy", "model_train.capsnet.lr=0.01", f"output_dir={tmp_path}"])
    assert model_trains(cfg)["capsnet"].lr == 0.01
    assert model_trains(cfg)["capsnet"].epochs == cfg.train.epochs
    assert model_trains(cfg)["cnn_sabour"].lr == cfg.train.lr == 0.001


def test_derived_defaults(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    monkeypatch.setenv("CAPSBENCH_DATA", str(tmp_path / "data"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("CAPSBENCH_CACHE", raising=False)
    cfg = compose(["suite=accuracy", f"output_dir={tmp_path}/out"])
    assert cfg.data.root == str(tmp_path / "data")
    assert cfg.tracking.uri == f"sqlite:///{tmp_path}/out/mlflow.db"
    assert cfg.cache_dir == f"{tmp_path}/out/checkpoints"
    assert cfg.device in ("cpu", "cuda")


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["suite=acuracy"], "did you mean 'accuracy'"),
        (["suite=accuracy", "sedds=[1]"], "did you mean 'seeds'"),
        (["suite=accuracy", "train.epoch=3"], "did you mean 'epochs'"),
        (["suite=accuracy", "train.epochs=three"], "train.epochs"),
        (["suite=accuracy", "seeds=abc"], "seeds"),
        (["suite=accuracy", "models=[capsnett]"], "did you mean 'capsnet'"),
        (["suite=accuracy", "model_args.capsnet.routing=2"], "routing_iterations"),
        (["suite=accuracy", "model_train.capsnet.lrr=0.01"], "did you mean 'lr'"),
        (["suite=accuracy", "model_train.capsnett.lr=0.01"], "did you mean 'capsnet'"),
        (["suite=accuracy", "model_train.capsnet.lr=fast"], "model_train.capsnet"),
        (["suite=accuracy", "budget=fast"], "smoke"),
        (["suite=accuracy", "dataset=mnits"], "did you mean 'mnist'"),
        (["suite=accuracy", "seeds=[]"], "seeds is empty"),
        (["suite=accuracy", "nonsense"], "expected key=value"),
        ([], "which suite"),
    ],
)
def test_bad_config_names_the_fix(overrides, message):
    with pytest.raises(CapsbenchError, match=message):
        compose(overrides)


def test_cli_error_is_one_line_exit_2_and_writes_nothing(tmp_path):
    out = tmp_path / "never"
    result = CliRunner().invoke(app, ["run", "suite=accuracy", "train.epochs=x", f"output_dir={out}"])
    assert result.exit_code == 2
    assert result.output.strip().startswith("error:") and len(result.output.strip().splitlines()) == 1
    assert "Traceback" not in result.output
    assert not out.exists()


def test_show_config_and_list():
    runner = CliRunner()
    shown = runner.invoke(app, ["show-config", "suite=accuracy", "budget=smoke"])
    assert shown.exit_code == 0 and "train_subset: 3000" in shown.output
    listed = runner.invoke(app, ["list", "models"])
    assert listed.exit_code == 0 and "capsnet" in listed.output and "cnn_9x9" in listed.output
    assert runner.invoke(app, ["list", "modles"]).exit_code == 2
