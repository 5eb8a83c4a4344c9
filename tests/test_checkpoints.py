"""Checkpoint cache: hit and miss, atomic writes under interruption, resume equals an uninterrupted run."""

import pytest
import torch

from capsbench.train.checkpoints import CheckpointCache
from capsbench.train.trained import default_protocol, obtain_model, training_identity
from capsbench.util.atomic import save_torch
from capsbench.util.hashing import content_key
from tests.conftest import unit_cfg


class ExplodesWhenPickled:
    def __reduce__(self):
        raise KeyboardInterrupt  # what Ctrl-C in the middle of torch.save looks like


def test_interrupted_write_leaves_no_file_and_keeps_the_old_one(tmp_path):
    path = tmp_path / "model.ckpt"
    with pytest.raises(KeyboardInterrupt):
        save_torch({"w": torch.ones(3), "bad": ExplodesWhenPickled()}, path)
    assert list(tmp_path.iterdir()) == []
    save_torch({"w": torch.ones(3)}, path)
    with pytest.raises(KeyboardInterrupt):
        save_torch({"w": torch.zeros(3), "bad": ExplodesWhenPickled()}, path)
    assert torch.equal(torch.load(path, weights_only=True)["w"], torch.ones(3))
    assert [p.name for p in tmp_path.iterdir()] == ["model.ckpt"]


def test_content_key_is_stable_and_sensitive():
    ident = {"model": "capsnet", "seed": 0, "args": {"a": [1, 2]}}
    assert content_key(ident) == content_key({"args": {"a": [1, 2]}, "seed": 0, "model": "capsnet"})
    assert content_key(ident) != content_key({**ident, "seed": 1})


def test_cache_hit_and_miss(smoke_cfg, tiny_splits):
    first = obtain_model(smoke_cfg, "cnn_9x9", 0, tiny_splits)
    assert not first.cached and first.path.exists()
    second = obtain_model(smoke_cfg, "cnn_9x9", 0, tiny_splits)
    assert second.cached and second.key == first.key
    for a, b in zip(first.model.state_dict().values(), second.model.state_dict().values()):
        assert torch.equal(a, b)
    other_seed = obtain_model(smoke_cfg, "cnn_9x9", 1, tiny_splits)
    assert not other_seed.cached and other_seed.key != first.key
    smoke_cfg.retrain = True
    assert not obtain_model(smoke_cfg, "cnn_9x9", 0, tiny_splits).cached


def test_model_train_settings_train_and_key_the_checkpoint(smoke_cfg, tiny_splits):
    plain = obtain_model(smoke_cfg, "cnn_9x9", 0, tiny_splits)
    smoke_cfg.model_train = {"cnn_9x9": {"lr": 0.002}}
    tuned = obtain_model(unit_cfg(smoke_cfg, "cnn_9x9"), "cnn_9x9", 0, tiny_splits)
    assert not tuned.cached and tuned.key != plain.key
    assert tuned.meta["identity"]["train"]["lr"] == 0.002


def test_identity_covers_what_changes_weights(smoke_cfg, tiny_splits):
    base = content_key(training_identity(smoke_cfg, "capsnet", 0, tiny_splits, default_protocol(smoke_cfg)))
    smoke_cfg.train.lr = 0.5
    assert content_key(training_identity(smoke_cfg, "capsnet", 0, tiny_splits, default_protocol(smoke_cfg))) != base
    smoke_cfg.train.lr = 0.003
    smoke_cfg.model_args.capsnet.routing_iterations = 1
    assert content_key(training_identity(smoke_cfg, "capsnet", 0, tiny_splits, default_protocol(smoke_cfg))) != base
    smoke_cfg.train.eval_batch_size = 7  # does not change the weights
    smoke_cfg.model_args.capsnet.routing_iterations = 3
    assert content_key(training_identity(smoke_cfg, "capsnet", 0, tiny_splits, default_protocol(smoke_cfg))) == base


def test_interrupted_training_resumes_to_the_same_weights(smoke_cfg, tiny_splits, tmp_path):
    smoke_cfg.train.epochs = 2
    smoke_cfg.cache_dir = str(tmp_path / "uninterrupted")
    reference = obtain_model(smoke_cfg, "capsnet", 0, tiny_splits)

    smoke_cfg.cache_dir = str(tmp_path / "interrupted")
    cache = CheckpointCache(smoke_cfg.cache_dir)
    real_save = cache.save_partial

    def interrupt_after_first_epoch(self, key, payload):
        real_save(key, payload)
        raise KeyboardInterrupt

    original = CheckpointCache.save_partial
    CheckpointCache.save_partial = interrupt_after_first_epoch
    try:
        with pytest.raises(KeyboardInterrupt):
            obtain_model(smoke_cfg, "capsnet", 0, tiny_splits)
    finally:
        CheckpointCache.save_partial = original
    assert not cache.path(reference.key).exists() and cache.partial_path(reference.key).exists()

    resumed = obtain_model(smoke_cfg, "capsnet", 0, tiny_splits)
    assert not resumed.cached and not cache.partial_path(reference.key).exists()
    assert resumed.meta["history"] == reference.meta["history"]
    for a, b in zip(reference.model.state_dict().values(), resumed.model.state_dict().values()):
        assert torch.equal(a, b)
