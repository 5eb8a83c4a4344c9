"""A user's model code cannot end a run silently: a sys.exit() or a KeyboardInterrupt raised by its import,
constructor, forward pass or loss is that code's error (exit 2 in the check before work, with nothing written; exit 3
during the run, its unit failed and the others measured), and every error from that code names the user's own file
and line. A forward pass that hangs in the check before work is named within seconds."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, make_splits
from typer.testing import CliRunner

from capsbench.cli import app
from capsbench.run import execute, model_trial

USER = '''"""A user's models that end the process or fail."""
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F

from capsbench.models import Classifier, ModelOutput


class Plain(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.fc = nn.Linear(28 * 28, num_classes)

    def forward(self, x):
        return self.fc(x.flatten(1))


class ExitsWhenBuilt(Plain):
    def __init__(self, num_classes=10):
        super().__init__(num_classes)
        sys.exit(0)  # EXIT-INIT


class InterruptsInForward(Plain):
    def forward(self, x):
        raise KeyboardInterrupt  # INTERRUPT-FORWARD


class FailsInForward(Plain):
    def forward(self, x):
        return self.fc(x)  # FAIL-FORWARD: (B, 1, 28, 28) into a Linear of 784 inputs


class ExitsWhileTraining(Plain):
    def forward(self, x):
        if self.training:
            sys.exit(0)  # EXIT-TRAIN
        return super().forward(x)


class ExitsInLoss(Classifier):
    def __init__(self, num_classes=10):
        super().__init__()
        self.fc = nn.Linear(28 * 28, num_classes)

    def forward(self, x, labels=None):
        logits = self.fc(x.flatten(1))
        return ModelOutput(scores=logits.softmax(1), logits=logits)

    def loss(self, out, labels, images, **components):
        sys.exit(3)  # EXIT-LOSS


class OnAnotherDevice(Plain):
    def forward(self, x):  # OTHER-DEVICE
        return super().forward(x).to("meta")


class IntegerLogits(Plain):
    def forward(self, x):  # INTEGER-LOGITS
        return super().forward(x).round().long()


class ScoresElsewhere(Classifier):
    def __init__(self, num_classes=10):
        super().__init__()
        self.fc = nn.Linear(28 * 28, num_classes)

    def forward(self, x, labels=None):  # SCORES-ELSEWHERE
        logits = self.fc(x.flatten(1))
        return ModelOutput(scores=logits.softmax(1).to("meta"), logits=logits)


class Hangs(Plain):
    def forward(self, x):
        Path(__file__).with_name("hanging").touch()
        time.sleep(300)  # HANG
'''


@pytest.fixture
def user(tmp_path, monkeypatch):
    """The user's module `usermodels` on the path (this test's copy); line(tag): the line of its source marked # tag."""
    (tmp_path / "src").mkdir()
    path = tmp_path / "src" / "usermodels.py"
    path.write_text(USER)
    monkeypatch.syspath_prepend(str(tmp_path / "src"))
    lines = USER.splitlines()
    yield path, lambda tag: next(i for i, text in enumerate(lines, 1) if f"# {tag}" in text)
    sys.modules.pop("usermodels", None)


@pytest.fixture
def synthetic(monkeypatch):
    splits = lambda dataset, data: make_splits()  # noqa: E731
    monkeypatch.setattr(execute, "load_data", splits)
    monkeypatch.setattr(model_trial, "load_data", splits)


def run(out: Path, root: Path, *models: str):
    register = [f"register.{m.lower()}=usermodels:{m}" for m in models]
    return CliRunner().invoke(app, ["run", "suite=accuracy", "budget=smoke", "train.epochs=1", "device=cpu",
                                    "threads=1", "tracking.enabled=false", f"output_dir={out}", f"data.root={root}",
                                    *register, f"models=[{','.join(m.lower() for m in models)}]"])


@pytest.mark.parametrize("model, tag, said", [
    ("ExitsWhenBuilt", "EXIT-INIT", "usermodels:ExitsWhenBuilt(...) raised SystemExit(0): a model's code must raise an "
                                    "exception, not exit the process"),
    ("InterruptsInForward", "INTERRUPT-FORWARD", "its forward pass raised KeyboardInterrupt, with no signal: a model's "
                                                 "code must raise an exception, not interrupt the process"),
    ("FailsInForward", "FAIL-FORWARD", "its forward pass raised RuntimeError: addmm: mat1 and mat2 shapes cannot be "
                                       "multiplied"),
    ("OnAnotherDevice", "OTHER-DEVICE", "its forward pass returned logits on device meta for inputs on cpu: return "
                                        "every output on the inputs' device (x.device)"),
    ("IntegerLogits", "INTEGER-LOGITS", "its forward pass returned logits of dtype torch.int64: return floating-point "
                                        "outputs"),
])
def test_model_code_that_exits_or_fails_in_the_check_before_work_is_its_error(tmp_path, user, synthetic, mnist_root,
                                                                              model, tag, said):
    path, line = user
    result = run(tmp_path / "out", mnist_root, model)
    assert result.exit_code == 2, result.output
    (text,) = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert text.startswith(f"error: model '{model.lower()}': ") and said in text, text
    assert text.endswith(f"(at {path} line {line(tag)})"), text  # the user's line, not capsbench's adapter
    assert not (tmp_path / "out").exists()


def test_a_model_output_on_another_device_is_one_line_in_the_run_and_a_failed_check_in_check_model(
        tmp_path, user, synthetic, mnist_root):
    """A Classifier returning its own ModelOutput bypasses the adapter: the model check's first finding names it."""
    path, line = user
    result = run(tmp_path / "out", mnist_root, "ScoresElsewhere")
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (
        "error: model 'scoreselsewhere' on mnist: its forward pass returned scores on device meta for inputs on cpu: "
        "return every output on the inputs' device (x.device), with no .to(...), .cpu() or .cuda() at the end "
        f"(at {path} line {line('SCORES-ELSEWHERE')})")
    assert not (tmp_path / "out").exists()
    checked = CliRunner().invoke(app, ["check-model", "usermodels:ScoresElsewhere", f"data.root={mnist_root}",
                                       "device=cpu"])
    assert checked.exit_code == 1, checked.output
    assert ("FAIL outputs on the inputs' device, floating point: its forward pass returned scores on device meta "
            "for inputs on cpu") in checked.output and f"(at {path} line {line('SCORES-ELSEWHERE')})" in checked.output


def test_model_code_that_exits_during_the_run_fails_its_unit_with_exit_3(tmp_path, user, synthetic, mnist_root):
    path, line = user
    result = run(tmp_path, mnist_root, "ExitsWhileTraining", "ExitsInLoss")
    assert result.exit_code == 3, result.output
    assert "error: 2 unit(s) failed" in result.output
    assert (f"accuracy/exitswhiletraining-mnist-s0: the unit failed (SystemExit(0): a model's code must raise an "
            f"exception, not exit the process (at {path} line {line('EXIT-TRAIN')}))") in result.output
    assert (f"accuracy/exitsinloss-mnist-s0: the unit failed (SystemExit(3): a model's code must raise an exception, "
            f"not exit the process (at {path} line {line('EXIT-LOSS')}))") in result.output


HANG = """
import sys
from conftest import make_splits
from capsbench.__main__ import main
from capsbench.run import execute, model_trial

execute.load_data = model_trial.load_data = lambda dataset, data: make_splits()
sys.argv = ["capsbench", *sys.argv[1:]]
main()
"""


@pytest.mark.slow  # a CLI run in a subprocess: 14-36 s on 2 cores
def test_a_forward_pass_that_hangs_in_the_check_before_work_is_named_within_seconds(tmp_path, user, mnist_root):
    path, _ = user
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(path.parent), str(REPO / "tests")])}
    proc = subprocess.Popen([sys.executable, "-c", HANG, "run", "suite=accuracy", "budget=smoke", "device=cpu",
                             "register.hangs=usermodels:Hangs", "models=[hangs]", f"data.root={mnist_root}",
                             f"output_dir={tmp_path / 'out'}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 300
    while not (path.parent / "hanging").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
    hung = time.monotonic()
    said = []
    while not any("still checking model 'hangs'" in line for line in said):  # from a thread: stderr as it comes
        said.append(proc.stderr.readline())
        assert said[-1], said
    assert time.monotonic() - hung < 60, said  # the first note comes after WAIT_NOTE_S of waiting
    proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=300)
    assert proc.returncode == 130, rest
    assert any("checking model 'hangs' on 16 mnist test images before any work" in line for line in said), said
    assert "(its import, constructor or forward pass on 16 images has not returned) after " in said[-1]
    assert [line for line in rest.splitlines() if line.startswith("error:")] == [rest.strip()]
    assert not (tmp_path / "out" / "accuracy").exists()


@pytest.mark.parametrize("target, said", [
    ("subprocess:Popen", "is a class but no subclass of torch.nn.Module"),
    ("subprocess:call", "is a function not annotated to return a torch.nn.Module: annotate it, def call(...) -> "
                        "nn.Module"),
])
def test_a_callable_that_builds_no_model_is_refused_before_it_is_called(tmp_path, mnist_root, target, said):
    """A shared config file names code: register.x=subprocess:Popen with model_args.x.args=[touch, FILE] would run the
    command were it called. It never is: one line, exit 2, nothing written, FILE never made."""
    touched = tmp_path / "touched"
    result = CliRunner().invoke(app, ["run", "suite=accuracy", "budget=smoke", "models=[x]", f"register.x={target}",
                                      f"model_args.x.args=[touch,{touched}]", f"data.root={mnist_root}",
                                      f"output_dir={tmp_path / 'out'}"])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1] == (
        f"error: model 'x': {target} {said}; capsbench calls nothing else, so that a config naming any callable "
        "cannot run it")
    assert not touched.exists() and not (tmp_path / "out").exists()
