"""External models end to end on real MNIST: capsbench measures an external model with external weights exactly as a
plain PyTorch script does (the CLI and the Python API), and the example package's robustness runs say what they could
and could not attack."""

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch
from torchvision.datasets import MNIST
from typer.testing import CliRunner

import capsbench
from capsbench.cli import app
from capsbench.data.test_subset import draw_test_subset

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "external_model"
N = 500  # test images: capsbench's default seeded, class-stratified draw of N (or the first N where the script says)


def _test_accuracy(out_dir: Path) -> tuple[float, int]:
    (record,) = [r for r in map(json.loads, (out_dir / "accuracy" / "records.jsonl").read_text().splitlines())
                 if r["metric"] == "test_accuracy"]
    assert record["training"] == "external" and len(record["weights_sha256"]) == 64
    return record["value"], record["n"]


@pytest.mark.slow
def test_a_plain_module_with_outside_weights_scores_exactly_as_plain_pytorch(tmp_path, mnist_root):
    torch.manual_seed(0)
    train = MNIST(str(mnist_root), train=True, download=False)
    x = train.data[:3000].float().div(255).flatten(1)
    means = torch.stack([x[train.targets[:3000] == k].mean(0) for k in range(10)])
    torch.save({"linear.weight": means, "linear.bias": -0.5 * (means * means).sum(1)}, tmp_path / "centroid.pt")
    from byo_models.plain import Centroid  # the plain script: the module, the weights, the drawn N test images

    plain = Centroid()
    plain.load_state_dict(torch.load(tmp_path / "centroid.pt", weights_only=True))
    test = MNIST(str(mnist_root), train=False, download=False)
    drawn = torch.from_numpy(draw_test_subset(test.targets.numpy(), N, seed=0).indices)
    with torch.no_grad():
        correct = int((plain(test.data[drawn].unsqueeze(1).float() / 255).argmax(1) == test.targets[drawn]).sum())

    result = CliRunner().invoke(app, ["run", "suite=accuracy", "budget=smoke", "device=cpu", "tracking.enabled=false",
                                      f"data.root={mnist_root}", f"output_dir={tmp_path / 'cli'}",
                                      "register.ext=byo_models.plain:Centroid", "models=[ext]",
                                      f"weights.ext={tmp_path / 'centroid.pt'}", f"data.test_subset={N}"])
    assert result.exit_code == 0, result.output
    assert _test_accuracy(tmp_path / "cli") == (100.0 * correct / N, N)
    assert "| ext (training=external) |" in result.output
    api = capsbench.evaluate("byo_models.plain:Centroid", suite="accuracy", weights=tmp_path / "centroid.pt",
                             name="ext", budget="smoke", device="cpu", output_dir=str(tmp_path / "api"),
                             data={"root": str(mnist_root), "test_subset": N}, tracking={"enabled": False})
    assert _test_accuracy(tmp_path / "api") == (100.0 * correct / N, N)
    assert api.records.query("metric == 'test_accuracy'")["value"].item() == 100.0 * correct / N
    instance = capsbench.evaluate(plain, suite="accuracy", budget="smoke", device="cpu", output_dir=str(tmp_path / "i"),
                                  data={"root": str(mnist_root), "test_subset": N}, tracking={"enabled": False})
    assert instance.model == "centroid" and instance.tables["accuracy"].shape[0] == 1
    assert _test_accuracy(tmp_path / "i")[0] == 100.0 * correct / N


def _installed_example(tmp_path: Path) -> dict[str, str]:
    """The example package as pip would install it: importable, with its entry points (from its pyproject.toml)."""
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    dist = tmp_path / "site" / f"{project['name']}-{project['version']}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    points = project["entry-points"]["capsbench.models"]
    (dist / "entry_points.txt").write_text("[capsbench.models]\n" + "".join(f"{k} = {v}\n" for k, v in points.items()))
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(EXAMPLE), str(dist.parent)])}


API = """
import json, sys, capsbench
ev = capsbench.evaluate("tinycaps", suite="accuracy", weights=sys.argv[1], budget="smoke", device="cpu",
                        output_dir=sys.argv[2], data={"test_subset": int(sys.argv[3]), "test_subset_draw": "head"},
                        tracking={"enabled": False},
                        model_args={"tinycaps": {"conv_channels": 8}})
print(json.dumps(ev.records.query("metric == 'test_accuracy'")[["value", "n", "training"]].to_dict("records")))
"""


@pytest.mark.slow
def test_the_example_trained_by_its_plain_script_through_cli_api_and_robustness(tmp_path, mnist_root):
    env = {**_installed_example(tmp_path), "CAPSBENCH_DATA": str(mnist_root)}
    weights = tmp_path / "tinycaps.pt"

    def run(*args: str) -> str:
        done = subprocess.run([sys.executable, *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout

    script = run(str(EXAMPLE / "train.py"), "--data", str(mnist_root), "--out", str(weights), "--train-images", "1000",
                 "--epochs", "1", "--conv-channels", "8", "--test-images", str(N))
    correct = int(re.search(rf"clean accuracy on the first {N} test images: (\d+)/{N}", script).group(1))
    cli = ["-m", "capsbench.cli", "run", "budget=smoke", "device=cpu", "tracking.enabled=false",
           f"weights.tinycaps={weights}", "model_args.tinycaps.conv_channels=8"]
    listed = run("-m", "capsbench.cli", "list", "models")
    assert re.search(r"^tinycaps +\[external, entry point of tinycaps 0\.1\.0: tinycaps\.model:TinyCaps\]", listed,
                     re.M)
    run(*cli, "suite=accuracy", "models=[tinycaps]", f"data.test_subset={N}", "data.test_subset_draw=head",
        f"output_dir={tmp_path / 'cli'}")
    assert _test_accuracy(tmp_path / "cli") == (100.0 * correct / N, N)
    (api,) = json.loads(run("-c", API, str(weights), str(tmp_path / "api"), str(N)).splitlines()[-1])
    assert api == {"value": 100.0 * correct / N, "n": N, "training": "external"}

    run(*cli, "suite=robustness", "models=[tinycaps,tinycaps_plain]", f"weights.tinycaps_plain={weights}",
        "model_args.tinycaps_plain.conv_channels=8", f"output_dir={tmp_path / 'rob'}")
    lines = (tmp_path / "rob" / "robustness" / "records.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert {r["training"] for r in records} == {"external"}
    ran = {(r["model"], r["attack"]) for r in records if r["metric"] == "robust_accuracy"}
    assert {("tinycaps", a) for a in ("fgsm", "apgd", "worst_case")} <= ran  # reported alone
    chained = {(r["model"], r["attack"]) for r in records if r["metric"] == "marginal_breaks"}
    assert {("tinycaps", a) for a in ("apgd_targeted", "pgd_adaptive", "vote")} <= chained  # the ensemble
    skipped = {r["attack"]: r["reason"] for r in records if r["metric"] == "attack_skipped"}
    assert set(skipped) == {"pgd_adaptive", "vote"} and ("tinycaps_plain", "worst_case") in ran
    table = (tmp_path / "rob" / "robustness" / "table.md").read_text()
    assert "pgd_adaptive not run on tinycaps_plain: tinycaps_plain exposes no pre_squash class capsules" in table
    assert "vote not run on tinycaps_plain: tinycaps_plain exposes no vote_logits(x) hook" in table
    assert "| tinycaps (training=external) |" in table and "its worst case is not adaptive" in table
