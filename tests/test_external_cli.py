"""External models on the command line: bad input is one line, exit 2, nothing written; entry points; keys
that follow the user's source; `capsbench check-model` on a model that breaks each rule."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from capsbench.cli import app

TESTS = Path(__file__).resolve().parent
RUN = ["run", "suite=accuracy", "budget=smoke", "tracking.enabled=false", "device=cpu"]


def _env(*paths: Path) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join(str(p) for p in (*paths, TESTS))}


def _user_modules(tmp_path: Path) -> Path:
    """A directory of user modules that fail: a syntax error, and an import of a package that is not installed."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "typo_caps.py").write_text("import torch\n\n\nclass TypoCaps(torch.nn.Module)\n    pass\n")
    (src / "missing_dep.py").write_text('"""Needs a package that is not installed."""\nimport torch\nimport '
                                        "capsule_layers_not_installed\n\n\nclass Net(torch.nn.Module):\n    pass\n")
    return src


TORCH_FREE = [  # rejected while composing the config: nothing heavy is imported
    (["register.capsnet=byo_models.plain:PlainNet", "models=[capsnet]"], r"'capsnet' is a built-in model"),
    (["register.ext=byo_models.plain:Nope", "models=[ext]"],
     r"byo_models\.plain \(\S+plain\.py\) defines no class or function 'Nope' at its top level \(it defines: "),
    (["register.ext=nowhere_pkg.caps:Caps", "models=[ext]"], r"no module named 'nowhere_pkg\.caps' on the Python path"),
    (["register.ext=byo_models.plain", "models=[ext]"], r"expected package\.module:ClassOrFunction"),
    (["register.ext=typo_caps:TypoCaps", "models=[ext]"],
     r"typo_caps failed to import: SyntaxError at \S+typo_caps\.py line 4"),
    (["register.ext=byo_models.plain:PlainNet", "models=[ext]", "weights.ext={tmp}/none.pt"],
     r"weights\.ext=\S+none\.pt: no such file"),
    (["register.ext=byo_models.plain:PlainNet", "models=[ext]", "weights.ext={tmp}/w.npz"],
     r"weights\.ext=\S+w\.npz: expected a state dict \(\.pt or \.pth\) or a \.safetensors file"),
]
AT_PREFLIGHT = [  # rejected before anything is written, once the user's code has met a real batch
    (["register.ext=missing_dep:Net", "models=[ext]"],
     r"missing_dep failed to import: ModuleNotFoundError: No module named 'capsule_layers_not_installed' "
     r"\(at \S+missing_dep\.py line 3\)"),
    (["register.ext=byo_models.plain:PlainNet", "models=[ext]", "weights.ext={tmp}/wrong.pt"],
     r"does not fit model 'ext': missing keys conv\.weight, conv\.bias, fc\.weight, fc\.bias; unexpected keys w"),
    (["register.ext=byo_models.broken:ReturnsText", "models=[ext]"],
     r"returned a str: expected a ModelOutput, a \(B, C\) tensor of logits, a tuple or a dict"),
    (["register.ext=byo_models.broken:ReturnsNaN", "models=[ext]"], r"it returned NaN or inf in scores, logits"),
    (["register.ext=byo_models.broken:FailsToBuild", "models=[ext]"],
     r"byo_models\.broken:FailsToBuild\(\.\.\.\) raised ValueError: no such layer size \(at \S+broken\.py line \d+\)"),
]


def _probe(cli_probe, cases, tmp_path, env):
    out = tmp_path / "out"
    commands = [[*RUN, *[a.replace("{tmp}", str(tmp_path)) for a in args], f"output_dir={out}"] for args, _ in cases]
    probe = cli_probe(*commands, cwd=tmp_path, env=env)
    errors = [line for line in probe.stderr.splitlines() if line.startswith("error: ")]
    assert probe.codes == [2] * len(cases) and len(errors) == len(cases), probe.stderr
    for (_, message), line in zip(cases, errors):
        assert re.search(message, line), line
    assert not out.exists()
    return probe


def test_bad_outside_models_are_rejected_before_torch_loads(cli_probe, tmp_path):
    (tmp_path / "w.npz").write_bytes(b"")
    probe = _probe(cli_probe, TORCH_FREE, tmp_path, _env(_user_modules(tmp_path)))
    assert probe.heavy == []


@pytest.mark.slow  # a CLI run in a subprocess: 14-36 s on 2 cores
def test_bad_code_weights_and_outputs_are_one_line_before_anything_is_written(cli_probe, tmp_path, mnist_root):
    torch.save({"w": torch.zeros(1)}, tmp_path / "wrong.pt")
    _probe(cli_probe, AT_PREFLIGHT, tmp_path, {**_env(_user_modules(tmp_path)), "CAPSBENCH_DATA": str(mnist_root)})


def test_entry_points_are_listed_and_run_like_built_in_names(cli_probe, tmp_path):
    dist = tmp_path / "site" / "fakecaps-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fakecaps\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[capsbench.models]\nepcaps = byo_models.caps:Caps\ncapsnet = byo_models.plain:PlainNet\n"
    )
    probe = cli_probe(["list", "models"], ["list", "models", "--format", "json"],
                      ["show-config", "suite=accuracy", "models=[epcaps]"], cwd=tmp_path, env=_env(tmp_path / "site"))
    assert probe.codes == [0, 0, 0], probe.stderr
    assert re.search(r"^epcaps +\[external, entry point of fakecaps 0\.1: byo_models\.caps:Caps\] Class capsules",
                     probe.stdout, re.M)
    rows = {r["name"]: r for r in json.loads(probe.stdout[probe.stdout.index("[\n {"):probe.stdout.rindex("]") + 1])}
    assert rows["capsnet"]["class"] == "capsbench.models.capsnet:CapsNet"  # an entry point never shadows a built-in
    assert rows["epcaps"]["external"] == "entry point of fakecaps 0.1"
    assert "ignoring entry point 'capsnet'" in probe.stderr


KEYS = """
from composing import compose
from capsbench.run.plan import plan
from capsbench.train.trained import default_protocol, training_identity
from capsbench.util.hashing import content_key
from conftest import make_splits
cfg = compose(["suite=accuracy", "budget=smoke", "device=cpu", "output_dir=out",
               "register.ext=byo_models.plain:PlainNet", "models=[ext]"])
print(plan(cfg)[0].key, content_key(training_identity(cfg, "ext", 0, make_splits(), default_protocol(cfg))))
"""


@pytest.mark.slow  # a CLI run in a subprocess: 14-36 s on 2 cores
def test_keys_change_when_the_users_source_changes_and_only_then(tmp_path):
    copy = tmp_path / "pkg" / "byo_models"
    shutil.copytree(TESTS / "byo_models", copy, ignore=shutil.ignore_patterns("__pycache__"))

    def keys() -> list[str]:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(copy.parent), str(TESTS)])}
        done = subprocess.run([sys.executable, "-c", KEYS], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    before = keys()
    plain = copy / "plain.py"
    plain.write_text(plain.read_text().replace('"""A tiny CNN returning logits."""', "# a comment\n"))
    (copy / "caps.py").write_text((copy / "caps.py").read_text() + "\nEDITED = 1\n")  # not imported by plain.py
    assert keys() == before
    plain.write_text(plain.read_text().replace("torch.relu(self.conv(x))", "torch.tanh(self.conv(x))"))
    after = keys()
    assert after[0] != before[0] and after[1] != before[1]


def _check(tmp_path, mnist_root, name, *extra):
    args = ["check-model", name, f"data.root={mnist_root}", f"output_dir={tmp_path / 'out'}", *extra]
    result = CliRunner().invoke(app, args)
    assert not (tmp_path / "out").exists()
    return result


def _centroid_weights(path: Path, mnist_root: Path) -> None:
    """Nearest-centroid weights from 2,000 real training images: w_k = class mean, b_k = -|w_k|^2 / 2."""
    from capsbench.data import load_splits

    splits = load_splits("mnist", root=mnist_root, download=False, val_size=5000, train_subset=2000)
    x = splits.train_x.float().div(255).flatten(1)
    means = torch.stack([x[splits.train_y == k].mean(0) for k in range(10)])
    torch.save({"inner.linear.weight": means, "inner.linear.bias": -0.5 * (means * means).sum(1)}, path)


@pytest.mark.parametrize(
    ("name", "failure"),
    [
        ("byo_models.broken:WrongClasses", "FAIL scores shape: scores have shape (256, 5) for 256 images; expected "
                                           "(256, 10)"),
        ("byo_models.broken:DisagreeingLogits", "FAIL argmax scores = argmax logits: the argmax of the scores and of "
                                                "the logits differ on 256 of 256 images"),
        ("byo_models.broken:Random", "FAIL deterministic in eval mode: two eval-mode passes on the same images differ"),
        ("byo_models.broken:Detached", "FAIL input gradients: its logits do not depend on the input differentiably"),
        ("byo_models.broken:NaNGradient", "FAIL input gradients: input gradients contain NaN or inf"),
        ("byo_models.broken:PreSquashReversed", "FAIL pre_squash agrees with the lengths: the pre_squash norms order"),
    ],
)
def test_check_model_names_the_rule_a_model_breaks(tmp_path, mnist_root, name, failure):
    result = _check(tmp_path, mnist_root, name)
    assert result.exit_code == 1, result.output
    assert failure in result.output and "check(s) failed" in result.output
    assert "cost: " in result.output and " MACs per image" in result.output


def test_check_model_finds_inputs_expected_in_another_range(tmp_path, mnist_root):
    _centroid_weights(tmp_path / "centroid.pt", mnist_root)
    result = _check(tmp_path, mnist_root, "byo_models.broken:Expects255", f"weights={tmp_path / 'centroid.pt'}")
    assert result.exit_code == 1, result.output
    assert "FAIL inputs in [0, 1]: accuracy on 256 test images [0, 1]: " in result.output
    assert "it expects 0..255 inputs; move that normalisation into its forward pass" in result.output


def test_check_model_passes_a_capsule_model_with_hooks_and_a_built_in(tmp_path, mnist_root):
    result = _check(tmp_path, mnist_root, "byo_models.caps:Caps", "--format", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["passed"] and report["params"] == 784 * 40 + 40 and report["macs"] == 784 * 40
    checks = {f["check"]: f for f in report["findings"]}
    assert checks["pre_squash agrees with the lengths"]["ok"] and checks["vote_logits"]["ok"]
    assert checks["adaptive attacks"]["text"].startswith("pgd_adaptive runs (pre_squash")
    bare = _check(tmp_path, mnist_root, "byo_models.caps:CapsLengths")
    assert bare.exit_code == 0 and "info adaptive attacks: pgd_adaptive will not run: capslengths exposes no " \
                                   "pre_squash class capsules" in bare.output
    assert _check(tmp_path, mnist_root, "cnn_9x9", "budget=smoke").exit_code == 0
