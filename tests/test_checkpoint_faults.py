"""A truncated or garbage checkpoint (finished or partial) is reported once with its path, moved aside and retrained;
nothing is ever loaded with weights_only=False."""

import logging
import random

import pytest
import torch

from capsbench.train import checkpoints
from capsbench.train.checkpoints import CheckpointCache
from capsbench.train.trained import default_protocol, obtain_model, training_identity
from capsbench.util.hashing import content_key


def _damage(path, how: str) -> bytes:
    data = path.read_bytes() if path.exists() else b""
    bad = data[: len(data) // 2] if how == "truncated" else random.Random(0).randbytes(4096)
    path.write_bytes(bad)
    return bad


SAID = {  # what the warning says of each damage
    "truncated": "it was cut short or damaged (its zip archive of ",
    "garbage": "it is no torch checkpoint (not the zip archive torch.save writes: damaged, or another kind of file)",
}


@pytest.fixture
def loads(monkeypatch):
    """Every torch.load call of the cache, with its keyword arguments."""
    calls = []
    real = torch.load

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(checkpoints.torch, "load", spy)
    return calls


@pytest.mark.parametrize("how", ["truncated", "garbage"])
def test_unreadable_checkpoint_is_moved_aside_and_retrained(smoke_cfg, tiny_splits, caplog, loads, how):
    first = obtain_model(smoke_cfg, "cnn_9x9", 0, tiny_splits)
    bad = _damage(first.path, how)
    with caplog.at_level(logging.WARNING, logger="capsbench.train.checkpoints"):
        again = obtain_model(smoke_cfg, "cnn_9x9", 0, tiny_splits)
    assert not again.cached and again.key == first.key
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(first.path) in warnings[0] and "weights_only=False" not in warnings[0]
    assert SAID[how] in warnings[0], warnings[0]
    (aside,) = first.path.parent.glob(f"{first.key}.ckpt.corrupt-*")
    assert aside.read_bytes() == bad  # kept for inspection, under a name the cache never reads
    assert obtain_model(smoke_cfg, "cnn_9x9", 0, tiny_splits).cached  # the next run finds the retrained one
    assert loads and all(call.get("weights_only") is True for call in loads)


@pytest.mark.parametrize("how", ["truncated", "garbage"])
def test_unreadable_resume_file_is_moved_aside_and_training_starts_over(smoke_cfg, tiny_splits, caplog, loads, how):
    smoke_cfg.train.epochs = 2
    key = content_key(training_identity(smoke_cfg, "cnn_9x9", 0, tiny_splits, default_protocol(smoke_cfg)))
    cache = CheckpointCache(smoke_cfg.cache_dir)
    cache.save_partial(key, {"model": {"w": torch.ones(1000)}, "epoch": 0})  # a real file to truncate
    _damage(cache.partial_path(key), how)
    with caplog.at_level(logging.WARNING, logger="capsbench.train.checkpoints"):
        trained = obtain_model(smoke_cfg, "cnn_9x9", 0, tiny_splits)
    assert trained.key == key and len(trained.meta["history"]) == 2  # both epochs trained from the start
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and str(cache.partial_path(key)) in warnings[0] and SAID[how] in warnings[0]
    assert len(list(cache.directory.glob(f"{key}.partial.ckpt.corrupt-*"))) == 1
    assert not cache.partial_path(key).exists()
    assert all(call.get("weights_only") is True for call in loads)


def test_a_readable_file_that_is_not_a_checkpoint_is_moved_aside(smoke_cfg, tiny_splits, caplog):
    first = obtain_model(smoke_cfg, "cnn_9x9", 0, tiny_splits)
    torch.save({"weights": torch.ones(2)}, first.path)  # loads fine, but holds no state_dict / meta
    with caplog.at_level(logging.WARNING, logger="capsbench.train.checkpoints"):
        assert not obtain_model(smoke_cfg, "cnn_9x9", 0, tiny_splits).cached
    assert "lacks state_dict, meta" in caplog.text


def test_a_checkpoint_of_another_model_is_quarantined_and_retrained(smoke_cfg, tiny_splits, caplog):
    """A readable checkpoint whose weights do not fit its model (another model's file under this key): named, moved
    aside like a corrupt one, and trained again, instead of failing every rerun in load_state_dict."""
    other = obtain_model(smoke_cfg, "cnn_9x9", 0, tiny_splits)
    key = content_key(training_identity(smoke_cfg, "capsnet", 0, tiny_splits, default_protocol(smoke_cfg)))
    cache = CheckpointCache(smoke_cfg.cache_dir)
    cache.path(key).write_bytes(other.path.read_bytes())
    with caplog.at_level(logging.WARNING, logger="capsbench.train.checkpoints"):
        trained = obtain_model(smoke_cfg, "capsnet", 0, tiny_splits)
    assert not trained.cached and trained.key == key
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert str(cache.path(key)) in warning and "its weights do not fit the model: missing " in warning
    assert "unexpected " in warning and "training again" in warning
    assert len(list(cache.directory.glob(f"{key}.ckpt.corrupt-*"))) == 1
    assert obtain_model(smoke_cfg, "capsnet", 0, tiny_splits).cached


def test_state_mismatch_names_keys_and_shapes():
    expected = {"a.weight": torch.zeros(2, 3), "a.bias": torch.zeros(2)}
    assert checkpoints.state_mismatch(expected, {"a.weight": torch.ones(2, 3), "a.bias": torch.ones(2)}) is None
    assert checkpoints.state_mismatch(expected, {"a.weight": torch.ones(3, 3), "b": torch.ones(1)}) == (
        "missing a.bias; unexpected b; shape a.weight (3, 3) instead of (2, 3)")
    assert checkpoints.state_mismatch(expected, [1, 2]) == "it holds a list, not a state dict"


def test_a_checkpoint_cut_where_torch_raises_oserror_is_moved_aside_and_listed(smoke_cfg, tiny_splits, caplog):
    """Cut to 20,000 bytes, a finished checkpoint makes torch.load raise OSError (EINVAL from its zip reader), not the
    RuntimeError of other lengths: still named, moved aside and trained again, and `list checkpoints` marks it."""
    from capsbench.run.checkpoint_list import list_checkpoints

    first = obtain_model(smoke_cfg, "cnn_9x9", 0, tiny_splits)
    with first.path.open("r+b") as fh:
        fh.truncate(20_000)
    with pytest.raises(OSError):
        torch.load(first.path, weights_only=True)
    (row,) = list_checkpoints(first.path.parent)
    assert row["key"] == first.key and not row["readable"]
    with caplog.at_level(logging.WARNING, logger="capsbench.train.checkpoints"):
        again = obtain_model(smoke_cfg, "cnn_9x9", 0, tiny_splits)
    assert not again.cached and again.key == first.key
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert str(first.path) in warning and "training again" in warning
    assert "it was cut short or damaged (its zip archive of 20,000 bytes cannot be read)" in warning
    assert len(list(first.path.parent.glob(f"{first.key}.ckpt.corrupt-*"))) == 1
    assert obtain_model(smoke_cfg, "cnn_9x9", 0, tiny_splits).cached
