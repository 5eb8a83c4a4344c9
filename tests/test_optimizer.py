"""train.optimizer / momentum / weight_decay / lr_milestones: validation, checkpoint key, schedule."""

import pytest
import torch
from composing import compose

from capsbench.config.per_model import model_trains
from capsbench.errors import CapsbenchError
from capsbench.train.loop import make_optimizer
from capsbench.train.trained import default_protocol, obtain_model, training_identity
from tests.conftest import unit_cfg


@pytest.mark.parametrize("override, message", [
    ("train.optimizer=sgdd", "did you mean 'sgd'"),
    ("train.momentum=1.5", "train.momentum must be in \\[0, 1\\)"),
    ("train.weight_decay=-0.1", "train.weight_decay must be >= 0"),
    ("train.lr_milestones=[5,3]", "train.lr_milestones must be increasing"),
    ("train.lr_milestones=[0]", "train.lr_milestones must be increasing"),
    ("model_train.resnet20.optimizer=rmsprop", "model_train.resnet20.optimizer='rmsprop'"),
])
def test_bad_optimizer_settings_name_the_fix(tmp_path, override, message):
    with pytest.raises(CapsbenchError, match=message):
        compose(["suite=accuracy", override, f"output_dir={tmp_path}"])


def test_paper_budget_trains_the_resnets_with_he_et_al_recipe(tmp_path):
    cfg = compose(["suite=accuracy", "budget=paper", f"output_dir={tmp_path}"])
    for name in ("resnet20", "resnet56", "resnet110"):
        t = model_trains(cfg)[name]
        assert (t.optimizer, t.lr, t.momentum, t.weight_decay, t.batch_size) == ("sgd", 0.1, 0.9, 0.0001, 128)
        assert (list(t.lr_milestones), t.lr_decay, t.epochs) == ([91, 136], 0.1, 182)  # 32k, 48k, 64k iterations / 352
    assert model_trains(cfg)["capsnet"].optimizer == "adam"


def test_optimizer_settings_enter_the_key_only_when_not_the_default(smoke_cfg, tiny_splits):
    def train_identity():
        return training_identity(smoke_cfg, "cnn_9x9", 0, tiny_splits, default_protocol(smoke_cfg))["train"]

    assert set(train_identity()) == {"epochs", "batch_size", "lr", "lr_decay"}  # Adam checkpoints keep their keys
    smoke_cfg.train.weight_decay = 1e-4
    assert train_identity()["weight_decay"] == 1e-4 and "optimizer" not in train_identity()
    smoke_cfg.train.optimizer, smoke_cfg.train.lr_milestones = "sgd", [2]
    assert {k: train_identity()[k] for k in ("optimizer", "momentum", "lr_milestones")} == {
        "optimizer": "sgd", "momentum": 0.9, "lr_milestones": [2]}


def test_sgd_step_schedule_known_learning_rates(smoke_cfg):
    t = smoke_cfg.train
    t.optimizer, t.lr, t.momentum, t.weight_decay, t.lr_decay, t.lr_milestones = "sgd", 0.1, 0.8, 1e-4, 0.1, [2, 4]
    opt, sched = make_optimizer(torch.nn.Linear(2, 2).parameters(), t)
    assert isinstance(opt, torch.optim.SGD)
    assert (opt.defaults["momentum"], opt.defaults["weight_decay"]) == (0.8, 1e-4)
    lrs = []
    for _ in range(5):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == pytest.approx([0.1, 0.1, 0.01, 0.01, 0.001])
    t.optimizer, t.lr_milestones, t.lr_decay = "adam", None, 0.5
    opt, sched = make_optimizer(torch.nn.Linear(2, 2).parameters(), t)
    opt.step()
    sched.step()
    assert isinstance(opt, torch.optim.Adam) and opt.param_groups[0]["lr"] == pytest.approx(0.05)


def test_a_model_trains_with_sgd_and_gets_its_own_checkpoint(smoke_cfg, tiny_splits):
    adam = obtain_model(smoke_cfg, "cnn_9x9", 0, tiny_splits)
    smoke_cfg.model_train = {"cnn_9x9": {"optimizer": "sgd", "lr": 0.05, "weight_decay": 1e-4}}
    sgd = obtain_model(unit_cfg(smoke_cfg, "cnn_9x9"), "cnn_9x9", 0, tiny_splits)
    assert not sgd.cached and sgd.key != adam.key and sgd.meta["identity"]["train"]["optimizer"] == "sgd"
    assert any(not torch.equal(a, b) for a, b in zip(adam.model.state_dict().values(), sgd.model.state_dict().values()))
