"""Shared fixtures: tiny synthetic splits, a smoke config in a temporary directory, the real MNIST root, and the
command line run in a fresh interpreter that reports which heavy libraries it imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from composing import compose

from capsbench.data import DatasetSpec, Splits

REPO = Path(__file__).resolve().parent.parent
MNIST_ROOT = Path(os.environ.get("CAPSBENCH_DATA", REPO.parent / "shared" / "datasets"))


def make_splits(n_train: int = 64, n_val: int = 32, n_test: int = 32, size: int = 28) -> Splits:
    """Random uint8 images whose label is encoded in the brightest row band, so models can learn it."""
    g = torch.Generator().manual_seed(0)

    def split(n: int) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.randint(0, 10, (n,), generator=g)
        x = torch.randint(0, 60, (n, 1, size, size), generator=g, dtype=torch.uint8)
        for i, label in enumerate(y.tolist()):
            x[i, 0, 2 * label + 4 : 2 * label + 6, 4:-4] = 255
        return x, y

    spec = DatasetSpec(
        load=lambda root, download: None, in_channels=1, image_size=size, num_classes=10, description="synthetic"
    )
    return Splits("synthetic", *split(n_train), *split(n_val), *split(n_test), spec=spec)


def fit_on_bands(model: torch.nn.Module, splits: Splits, epochs: int) -> torch.nn.Module:
    """`model` trained by Adam (lr 3e-3) on the splits' training images in seeded batches of 32, in eval mode."""
    from capsbench.data import batches

    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(epochs):
        for images, labels in batches(splits.train_x, splits.train_y, 32, shuffle_generator=gen):
            loss = model.loss(model(images, labels), labels, images)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model.eval()


@pytest.fixture
def tiny_splits() -> Splits:
    return make_splits()


@pytest.fixture
def smoke_cfg(tmp_path: Path):
    """The smoke budget with everything written under tmp_path and MLflow off."""
    return compose(
        [
            "suite=accuracy",
            "budget=smoke",
            f"output_dir={tmp_path}",
            "tracking.enabled=false",
            "train.epochs=1",
            "device=cpu",
        ]
    )


def unit_cfg(cfg, model: str, seed: int = 0):
    """What a unit of `model` reads: the run config with its per-model settings resolved, as the planner does."""
    from capsbench.run.plan import training_unit

    return training_unit(cfg, model, seed).run_config()


@pytest.fixture(autouse=True)
def own_tracking_uri(monkeypatch):
    """No MLFLOW_TRACKING_URI in a test, and none left behind: mlflow.set_tracking_uri exports it, which would send
    every later run, and every subprocess, to that test's store."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.fixture(scope="session")
def mnist_root() -> Path:
    if not (MNIST_ROOT / "MNIST" / "raw" / "t10k-labels-idx1-ubyte").exists():
        pytest.skip(f"real MNIST not found under {MNIST_ROOT} (set CAPSBENCH_DATA)")
    return MNIST_ROOT


@pytest.fixture(scope="session")
def tracked_store(tmp_path_factory):
    """A real MLflow SQLite store written by two `capsbench run` invocations (seeds 0,1 then 2,3) of the
    accuracy suite at the smoke budget, on synthetic images: (tracking uri, output dir, records of both)."""
    from capsbench.run import driver, execute

    out = tmp_path_factory.mktemp("tracked")
    uri = f"sqlite:///{out / 'mlflow.db'}"
    records = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(execute, "load_data", lambda dataset, data: make_splits())
        for seeds in ("[0,1]", "[2,3]"):
            cfg = compose(
                [
                    "suite=accuracy",
                    "budget=smoke",
                    f"output_dir={out}",
                    f"tracking.uri={uri}",
                    "train.epochs=1",
                    "device=cpu",
                    f"seeds={seeds}",
                    "models=[capsnet,cnn_sabour]",
                ]
            )
            records += driver.run_suite(cfg).records
    return uri, out, records


HEAVY = ("torch", "torchvision", "torchattacks", "mlflow", "pandas", "matplotlib", "scipy", "fvcore", "ray", "submitit")
MARKER = "CAPSBENCH_PROBE="
PROBE = f"""
import json, sys
from capsbench.cli import app
codes = []
for args in json.loads(sys.argv[1]):
    try:
        app(args, prog_name="capsbench")
    except SystemExit as exc:
        codes.append(exc.code or 0)
heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)
print({MARKER!r} + json.dumps({{"codes": codes, "heavy": heavy}}), file=sys.stderr)
"""


@dataclass
class Probe:
    """What command-line runs did: exit codes, output, and the heavy libraries imported by the end."""

    codes: list[int]
    stdout: str
    stderr: str  # without the probe's own line
    heavy: list[str]

    @property
    def code(self) -> int:
        return self.codes[-1]


def _run_cli(*commands: list[str], cwd: Path, env: dict[str, str] | None = None) -> Probe:
    """Each command (`capsbench` arguments) in turn, in one fresh interpreter started in `cwd`."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(commands)],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = done.stderr.splitlines()
    report = [line for line in lines if line.startswith(MARKER)]
    assert report, f"the probe did not report (exit {done.returncode}):\n{done.stderr}"
    rest = "\n".join(line for line in lines if not line.startswith(MARKER))
    found = json.loads(report[-1].removeprefix(MARKER))
    return Probe(found["codes"], done.stdout, rest, found["heavy"])


@pytest.fixture
def cli_probe():
    """cli_probe(*commands, cwd=..., env=None) -> Probe: `capsbench` commands in a fresh interpreter."""
    return _run_cli
