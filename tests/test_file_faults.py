"""Every file capsbench reads is checked for what it claims to be: a unit file against the full schema of a unit result
(each field's type: a re-signed file whose params is a list is moved aside with one warning and measured again), a
config= file as UTF-8 text and as a file, weights as tensors whose dtypes fit the model's (integer weights are refused
naming the tensor, never cast), and a pickled object refused in a whole sentence."""

import json
import os
import pickle
import re
from pathlib import Path

import pytest
import torch
from composing import compose
from conftest import make_splits
from safetensors.torch import save_file
from typer.testing import CliRunner

from capsbench.cli import app
from capsbench.errors import CapsbenchError
from capsbench.models.external import register_alias
from capsbench.models.weights import load_weights, read_state_dict
from capsbench.run import driver, execute
from capsbench.run.plan import plan
from capsbench.run.store import UnitStore, _canonical, _digest

RUN = ["run", "suite=accuracy", "budget=smoke", "device=cpu", "threads=1", "train.epochs=1"]


def resign(path: Path, field: str, value) -> None:
    """Set a field of a unit file's result and sign it again, as a careful hand (or a bug) would."""
    data = json.loads(path.read_text())
    data["result"][field] = value
    data["sha256"] = _digest(_canonical(data["result"]))
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("field, value, said", [
    ("params", ["model_args.width", 8], "its field params is a list, not dict[str, Any]"),
    ("metrics", {"best_val_accuracy": "high"}, "its field metrics is a dict, not dict[str, float]"),
    ("spec", {"suite": "accuracy", "model": "cnn_9x9", "seed": "0", "variant": {}, "config": {}},
     "its field spec.seed is a str, not int"),
])
def test_a_resigned_unit_file_of_the_wrong_schema_is_moved_aside_and_measured_again(tmp_path, monkeypatch, caplog,
                                                                                     field, value, said):
    monkeypatch.setattr(execute, "load_data", lambda dataset, data: make_splits())
    cfg = compose([*RUN[1:], "models=[cnn_9x9]", f"output_dir={tmp_path}"])
    clean = driver.run_suite(cfg)
    (unit,) = plan(cfg)
    path = UnitStore(tmp_path).path(unit)
    resign(path, field, value)
    again = driver.run_suite(cfg)  # no AttributeError while its run is logged
    (warning,) = [r.getMessage() for r in caplog.records if "cannot be trusted" in r.getMessage()]
    assert f"unit result {path} of accuracy/cnn_9x9-mnist-s0 cannot be trusted ({said})" in warning
    assert again.records == clean.records and len(list(path.parent.glob("*.corrupt-*"))) == 1


@pytest.mark.parametrize("content, said", [
    ("suite: accuracy\n# Größe\n".encode("latin-1"), r"is not UTF-8 text \(byte 20: 0xf6\); save it as UTF-8 YAML"),
    (bytes(range(256)), r"is not UTF-8 text \(byte 128: 0x80\); save it as UTF-8 YAML"),
    (None, r"is a directory; give a YAML file of settings"),
])
def test_a_config_file_that_is_no_utf8_text_file_is_one_line_before_anything_is_written(tmp_path, content, said):
    config = tmp_path / "settings.yaml"
    config.mkdir() if content is None else config.write_bytes(content)
    result = CliRunner().invoke(app, [*RUN, f"config={config}", f"output_dir={tmp_path / 'out'}"])
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert re.fullmatch(rf"error: config={re.escape(str(config))} {said}.*", line), line
    assert not (tmp_path / "out").exists()


def test_integer_weights_are_refused_naming_the_tensor_and_its_dtype(tmp_path, mnist_root):
    plain = {"conv.weight": torch.zeros(4, 1, 5, 5, dtype=torch.int64), "conv.bias": torch.zeros(4, dtype=torch.int64),
             "fc.weight": torch.ones(10, 576), "fc.bias": torch.zeros(10)}
    save_file(plain, str(tmp_path / "w.safetensors"))  # PlainNet's keys and shapes, two tensors of integers
    result = CliRunner().invoke(app, [*RUN, "register.ext=byo_models.plain:PlainNet", "models=[ext]",
                                      f"weights.ext={tmp_path / 'w.safetensors'}", f"data.root={mnist_root}",
                                      f"output_dir={tmp_path / 'out'}"])
    assert result.exit_code == 2, result.output
    assert [line for line in result.output.splitlines() if line.startswith("error:")] == [
        f"error: weights.ext={tmp_path / 'w.safetensors'} does not fit model 'ext': tensor conv.weight is int64 where "
        "the model's is float32, conv.bias is int64 where the model's is float32 (loading would cast it silently); "
        "save the weights in the dtypes the model trained with: torch.save(model.state_dict(), 'w.pt')"]
    assert not (tmp_path / "out").exists()


def test_a_pickled_model_is_refused_in_whole_sentences(tmp_path):
    spec = register_alias("ext", "byo_models.plain:PlainNet", "register.ext")
    model = spec.build(num_classes=10)
    torch.save(model.module, tmp_path / "whole.pt")  # the module object, not its state dict
    with pytest.raises(CapsbenchError) as refused:
        load_weights(model, tmp_path / "whole.pt", "weights.ext", "ext")
    assert str(refused.value) == (
        f"weights.ext: cannot read {tmp_path / 'whole.pt'} as weights (it holds Python objects, not only tensors, and "
        "capsbench loads weights with weights_only=True so that a file cannot run code: Unsupported global: GLOBAL "
        "byo_models.plain.PlainNet was not an allowed global by default); save a state dict: "
        "torch.save(model.state_dict(), 'w.pt') or safetensors.torch.save_file(model.state_dict(), 'w.safetensors')")


class RunsACommand:
    """What a malicious weights file pickles: an object whose unpickling calls os.system."""

    def __reduce__(self):
        return os.system, ("true",)


@pytest.mark.parametrize("save, said", [
    (lambda obj, path: torch.save({"w": obj}, path), "Trying to load unsupported GLOBAL posix.system whose module "
                                                      "posix is blocked"),
    (lambda obj, path: path.write_bytes(pickle.dumps({"w": obj})), "Unsupported operand 149"),
], ids=["torch.save", "pickle.dump"])
def test_a_pickle_that_would_run_code_is_refused_saying_why(tmp_path, save, said):
    """Not as torch's bare "Weights only load failed": what the file holds, why it is refused, and what the unpickler
    found."""
    save(RunsACommand(), tmp_path / "w.pt")
    with pytest.raises(CapsbenchError) as refused:
        read_state_dict(tmp_path / "w.pt", "weights.ext")
    assert str(refused.value).startswith(
        f"weights.ext: cannot read {tmp_path / 'w.pt'} as weights (it holds Python objects, not only tensors, and "
        f"capsbench loads weights with weights_only=True so that a file cannot run code: {said}); save a state dict")


def test_an_empty_weights_file_and_a_config_that_is_no_regular_file_say_so(tmp_path):
    (tmp_path / "w.pt").write_bytes(b"")
    with pytest.raises(CapsbenchError, match=r"^weights\.ext: \S+w\.pt is empty \(0 bytes\): an interrupted copy or "
                                             r"save\? Save the state dict again"):
        read_state_dict(tmp_path / "w.pt", "weights.ext")
    result = CliRunner().invoke(app, ["run", "suite=accuracy", "config=/dev/null", f"output_dir={tmp_path / 'out'}"])
    assert result.exit_code == 2
    assert result.output.startswith("error: config=/dev/null: not a regular file; give a YAML")
