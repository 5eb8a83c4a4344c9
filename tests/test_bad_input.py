"""Bad input: one line naming the valid choices or range, exit status 2, nothing written, and all of it decided
before torch (or any other heavy library) is imported."""

import re

import pytest
from typer.testing import CliRunner

from capsbench.cli import app

ACC = ["run", "suite=accuracy"]
ROB = ["run", "suite=robustness"]
BAD = [
    (ACC + ["train.epochs=-1"], r"train\.epochs must be an integer >= 1, got -1"),
    (ACC + ["train.epochs=0"], r"train\.epochs must be an integer >= 1, got 0"),
    (ACC + ["train.batch_size=0"], r"train\.batch_size must be an integer >= 1"),
    (ACC + ["train.eval_batch_size=-5"], r"train\.eval_batch_size must be an integer >= 1"),
    (ACC + ["train.lr=0"], r"train\.lr must be a number > 0, got 0"),
    (ACC + ["train.lr_decay=1.5"], r"train\.lr_decay must be a number in \(0, 1\]"),
    (ACC + ["train.lr_decay=0"], r"train\.lr_decay must be a number in \(0, 1\]"),
    (ACC + ["train.target_val_accuracy=101"], r"train\.target_val_accuracy must be a percentage in \(0, 100\]"),
    (ACC + ["data.train_subset=0"], r"data\.train_subset must be an integer >= 1, or null"),
    (ACC + ["data.val_size=0"], r"data\.val_size must be an integer >= 1"),
    (ACC + ["data.max_shift=-1"], r"data\.max_shift must be an integer >= 0"),
    (ACC + ["data.max_shift=28"], r"data\.max_shift=28 would shift whole 28x28 mnist images off their canvas: give at "
                                  r"most 27"),
    (ACC + ["model_train.capsnet.epochs=0"], r"model_train\.capsnet\.epochs must be an integer >= 1"),
    (
        ROB + ["params.eps=[0.1]"],
        r"params\.eps maps dataset -> a list of numbers.*e\.g\. params\.eps\.mnist=\[0,0\.1\]",
    ),
    (ROB + ["params.eps=[-0.1]"], r"params\.eps maps dataset -> a list of numbers, got the list \[-0\.1\]"),
    (ROB + ["params.eps=[2]"], r"params\.eps maps dataset -> a list of numbers, got the list \[2\]"),
    (ROB + ["params.examples=-1"], r"params\.examples must be >= 0 \(images in each model's adversarial-example grid"),
    (ROB + ["params.blackbox_eps=0.1"], r"params\.blackbox_eps maps dataset -> a number.*blackbox_eps\.mnist=0\.1"),
    (["run", "suite=efficiency", "params.repeats=0"], r"params\.repeats must be an integer >= 1 \(timed calls"),
    (["run", "suite=efficiency", "params.routing_max_iterations=1"],
     r"params\.routing_max_iterations must be an integer >= 2 \(a slope per routing iteration needs r = 1 and 2"),
    (["run", "suite=routing", "params.warmup=-1"], r"params\.warmup must be an integer >= 0 \(untimed calls"),
    (["run", "suite=routing", "params.large_batch=0"], r"params\.large_batch must be an integer >= 1"),
    (["run", "suite=overlap", "params.test_pairs_per_digit=0"],
     r"params\.test_pairs_per_digit must be an integer >= 1 \(pairs of the fixed test set per test digit\), got 0"),
    (["run", "suite=overlap", "params.figure_pairs=-1"], r"params\.figure_pairs must be an integer >= 0"),
    (["run", "suite=efficiency", "tracking.uri=file://{tmp}/mlruns"],
     r"tracking\.uri=file://\S+/mlruns is a file store \(a folder like \./mlruns\), which this MLflow refuses to "
     r"open: point tracking\.uri="),
    (["report", "tracking.uri={tmp}/mlruns"], r"tracking\.uri=\S+/mlruns is a file store"),
    (ACC + ["model_args.capsnet=3"], r"model_args\.capsnet maps name -> a value.*model_args\.capsnet\.\w+="),
    (ACC + ["data=3"], r"data is a group of settings \(root, download"),
    (ACC + ["train.epochs=[3]"], r"train\.epochs takes an integer, got the list \[3\]"),
    (ACC + ["seeds=abc"], r"seeds takes a list of integers, got 'abc'; e\.g\. seeds=\[0,1,2\]"),
    (ACC + ["seeds=0"], r"seeds takes a list of integers, got 0; e\.g\. seeds=\[0\]"),
    (ACC + ["seeds=[a]"], r"seeds\[0\].*seeds takes a list of integers"),
    (ACC + ["seeds=[0,0]"], r"seeds lists 0 more than once"),
    (ACC + ["seeds=[99999999999999999999]"], r"seeds must be integers from 0 to 4294967295 \(2\*\*32 - 1\), got "
                                             r"\[99999999999999999999\]"),
    (ACC + ["seeds=[4294967296]"], r"seeds must be integers from 0 to 4294967295"),
    (ACC + ["seeds=[0,1"], r"cannot read seeds=\[0,1.*lists are written \[a,b\]"),
    (ACC + ["models=capsnet"], r"models takes a list of names, got 'capsnet'; e\.g\. models=\[capsnet\]"),
    (ACC + ["device=gpu"], r"device must be one of auto, cpu, cuda, cuda:N or mps, got 'gpu'"),
    (
        ACC + ["data.root={tmp}/nowhere/data"],
        r"data\.root=\S+/nowhere/data does not exist; point data\.root=DIR or CAPSBENCH_DATA",
    ),
    (["train", "model=capsnet", "train.epochs=-1"], r"train\.epochs must be an integer >= 1, got -1"),
    (["train", "model=capsnet", "seed=[0,1]"], r"seed= takes one integer here, e\.g\. seed=0, got \[0, 1\]; train them "
                                               r"one by one"),
    (["train", "model=capsnet", "seed=abc"], r"seed= takes one integer here, e\.g\. seed=0, got 'abc'$"),
    (["train", "model=[capsnet]"], r"model= names one model here, got \['capsnet'\]"),
    (["show-config", "suite=robustness", "params.eps=[0.1]"], r"params\.eps maps dataset"),
]


def _args(args: list[str], tmp_path) -> list[str]:
    return [a.replace("{tmp}", str(tmp_path)) for a in args] + [f"output_dir={tmp_path / 'out'}"]


@pytest.mark.parametrize("args, message", BAD, ids=[" ".join(a[1:]) for a, _ in BAD])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(args, message, tmp_path):
    result = CliRunner().invoke(app, _args(args, tmp_path))
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.output, result.output
    assert re.search(message, lines[0]), lines[0]
    assert list(tmp_path.iterdir()) == []  # no output directory, no data folders


def test_a_long_value_is_quoted_by_its_start_and_length(tmp_path):
    """seeds=[0,1,...,9999] (48,890 characters) is refused without echoing it back."""
    seeds = "[" + ",".join(map(str, range(10_000))) + "]"
    result = CliRunner().invoke(app, _args([*ACC, f"seeds={seeds}"], tmp_path))
    assert result.exit_code == 2 and len(result.output) < 400, result.output[:400]
    assert result.output.startswith(f"error: cannot read seeds={seeds[:60]}... ({len(seeds):,} characters): ")
    assert list(tmp_path.iterdir()) == []


def test_data_root_from_the_environment_is_named(tmp_path):
    result = CliRunner().invoke(app, _args(ACC, tmp_path), env={"CAPSBENCH_DATA": str(tmp_path / "typo")})
    assert result.exit_code == 2 and "(from CAPSBENCH_DATA) does not exist" in result.output
    assert list(tmp_path.iterdir()) == []


def test_every_rejection_happens_before_heavy_libraries_load(tmp_path, cli_probe):
    """All bad inputs above, rejected one after another in one fresh interpreter: torch is never imported."""
    probe = cli_probe(*[_args(args, tmp_path) for args, _ in BAD], cwd=tmp_path)
    assert probe.codes == [2] * len(BAD), probe.stderr
    assert probe.heavy == []
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("device, cuda, message", [
    ("mps", 0, r"device=mps but no MPS device is available \(Apple silicon, macOS 12\.3\+\); use device=cpu or auto"),
    ("cuda", 0, r"device=cuda but no CUDA device is available; use device=cpu or auto"),
    ("cuda:7", 2, r"device=cuda:7 but this machine has 2 CUDA device\(s\), cuda:0 to cuda:1; use one of them, or "
                  r"device=cuda"),
])
def test_a_device_this_machine_lacks_is_refused_before_any_unit(device, cuda, message, tmp_path, monkeypatch):
    """The device is the one check that needs torch; a missing one stops the run like any bad input (device=mps on
    Linux ran every unit to fail it)."""
    import torch

    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: cuda)
    result = CliRunner().invoke(app, _args([*ACC, "budget=smoke", f"device={device}"], tmp_path))
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and re.search(message, lines[0]), result.output
    assert list(tmp_path.iterdir()) == []
