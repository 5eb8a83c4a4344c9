"""The resolved environment: MLflow 3 beside torchattacks 3.3.0, whose wheel declares no dependencies (see
pyproject.toml); the README's install lines resolve with plain pip (slow: it asks the package index); every run
records the machine it ran on."""

import json
import re
import subprocess
import venv
from importlib import metadata
from pathlib import Path

import pytest

from capsbench.tracking.environment import cpu_model, machine_tags

ROOT = Path(__file__).resolve().parents[1]


def test_mlflow_3_and_torchattacks_installed_together():
    assert metadata.version("mlflow").startswith("3.")
    assert metadata.version("torchattacks") == "3.3.0"
    assert metadata.requires("torchattacks") is None  # nothing for pip to reconcile with MLflow's requests
    import torchattacks

    for name in ("Square", "APGD", "APGDT", "FAB", "MultiAttack"):  # what capsbench.attacks uses
        assert hasattr(torchattacks, name)


def test_the_machine_is_recorded():
    tags = machine_tags()
    assert tags["machine.cpu"] == cpu_model() and tags["machine.cpu"] not in ("", "unknown")
    assert int(tags["machine.cpus"]) >= 1 and tags["machine.gpus"]


def readme_pip_lines() -> list[str]:
    """The `pip install ...` commands of README.md's shell blocks, without comments (`pip install uv` included)."""
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, re.DOTALL)
    lines = [line.split("#")[0].strip() for block in blocks for line in block.splitlines()]
    parts = [part.strip() for line in lines for part in line.split("&&")]
    return list(dict.fromkeys(p for p in parts if p.startswith("pip install")))


def test_readme_names_the_pip_install_lines_it_promises():
    assert {"pip install .", "pip install '.[ray]'", "pip install '.[slurm]'"} <= set(readme_pip_lines())


@pytest.fixture(scope="module")
def fresh_python(tmp_path_factory) -> Path:
    """The interpreter of a new virtual environment with the pip that ships with this Python, nothing else."""
    env = tmp_path_factory.mktemp("fresh") / "venv"
    venv.create(env, with_pip=True)
    return env / "bin" / "python"


@pytest.mark.slow
@pytest.mark.parametrize("line", readme_pip_lines())
def test_every_readme_pip_line_resolves_with_plain_pip_in_a_fresh_venv(line, fresh_python):
    """Plain pip (no uv, no overrides) resolves each README install line in a new virtual environment; --dry-run
    resolves without installing anything (torch alone is gigabytes), so the environment stays fresh for each line."""
    python = fresh_python
    args = line.split()[2:]  # after "pip install"
    args = [a.strip("'") for a in args]
    run = subprocess.run([str(python), "-m", "pip", "install", "--dry-run", "--quiet", "--report", "-", *args],
                         cwd=ROOT, capture_output=True, text=True, timeout=1500)
    assert run.returncode == 0, f"pip could not resolve `{line}`:\n{run.stderr[-3000:]}"
    chosen = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.loads(run.stdout)["install"]}
    if "capsbench" in chosen:  # the project itself: MLflow 3 and the pinned torchattacks land beside it
        assert chosen["mlflow"].startswith("3.") and chosen["torchattacks"] == "3.3.0", chosen
        if "[ray]" in line:
            assert "ray" in chosen
        if "[slurm]" in line:
            assert "submitit" in chosen


def test_license_and_citation_agree_with_the_package():
    import yaml

    from capsbench import __version__

    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert {"cff-version", "message", "title", "authors"} <= set(cff)  # the keys CFF 1.2.0 requires
    assert cff["version"] == __version__ and cff["license"] == "MIT" == metadata.metadata("capsbench")["License"]
