"""Training that diverges stops: a non-finite loss fails the unit with the epoch and step, and no non-finite checkpoint
is ever cached or loaded."""

from __future__ import annotations

import pytest
import torch
from composing import compose
from conftest import make_splits
from typer.testing import CliRunner

from capsbench.cli import app
from capsbench.models import MODELS, create_model
from capsbench.run import execute
from capsbench.train.checkpoints import CheckpointCache
from capsbench.train.loop import Diverged, fit
from capsbench.train.trained import default_protocol

SMOKE = ["suite=accuracy", "budget=smoke", "device=cpu", "train.epochs=2", "train.batch_size=16", "models=[capsnet]",
         "seeds=[0]", "threads=1"]


class NanAfter:
    """A model's loss that turns NaN from its `step`-th call on (counting from 1)."""

    def __init__(self, loss, step: int) -> None:
        self.loss, self.step, self.calls = loss, step, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        value = self.loss(*args, **kwargs)
        return value * float("nan") if self.calls >= self.step else value


def test_a_nan_loss_stops_training_naming_the_epoch_and_step(tmp_path):
    cfg = compose([*SMOKE, f"output_dir={tmp_path}", "tracking.enabled=false"])
    model = create_model("capsnet", **MODELS.get("capsnet").test_args)
    model.loss = NanAfter(model.loss, step=3)
    with pytest.raises(Diverged, match=r"diverged at epoch 1, step 3: loss nan; lower train.lr or check the model"):
        fit(model, make_splits(), cfg, default_protocol(cfg), seed=0)


def test_a_diverging_unit_fails_exit_3_and_caches_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(execute, "load_data", lambda dataset, data: make_splits())
    real = create_model

    def diverging(name, **kwargs):
        model = real(name, **kwargs)
        model.loss = NanAfter(model.loss, step=3)
        return model

    monkeypatch.setattr("capsbench.train.trained.create_model", diverging)
    result = CliRunner().invoke(app, ["run", *SMOKE, f"output_dir={tmp_path}", "model_args.capsnet.conv_channels=8"])
    assert result.exit_code == 3, result.output
    assert "Diverged: diverged at epoch 1, step 3: loss nan" in result.output
    assert not list((tmp_path / "checkpoints").glob("*.ckpt"))  # neither a finished nor a resumable one


def test_a_cached_checkpoint_with_non_finite_weights_is_moved_aside(tmp_path):
    cache = CheckpointCache(tmp_path)
    state = {"w": torch.ones(2), "b": torch.tensor([1.0, float("inf")])}
    with pytest.raises(ValueError, match=r"not finite \(b\)"):
        cache.save("k", {"state_dict": state, "meta": {}})
    torch.save({"state_dict": state, "meta": {"identity": {}}}, cache.path("k"))  # written by anything else
    assert cache.load("k") is None
    assert not cache.path("k").exists() and list(tmp_path.glob("k.ckpt.corrupt-*"))
