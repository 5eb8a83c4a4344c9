"""The affine suite: the expanded-MNIST protocol, stop-at-target training, and sweeps whose zero point is centred
accuracy."""

import pytest
import torch
from composing import compose

from capsbench.errors import CapsbenchError
from capsbench.models import create_model
from capsbench.suites import SUITES, Context
from capsbench.suites.affine import SWEEPS, AffineTestSet, sweep_transform
from capsbench.train.evaluation import predict
from capsbench.train.loop import fit
from capsbench.train.protocols import CanvasProtocol
from capsbench.train.trained import training_identity


def test_canvas_protocol_trains_on_random_placements_and_evaluates_centred():
    protocol = CanvasProtocol(canvas=40)
    x = torch.rand(16, 1, 28, 28)
    assert protocol.input_size(28) == 40 and protocol.identity() == {"protocol": "canvas", "canvas": 40}
    batch = protocol.train_batch(x, torch.arange(16), torch.Generator().manual_seed(0))
    assert batch.inputs.shape == (16, 1, 40, 40) and torch.allclose(
        batch.inputs.sum(dim=(1, 2, 3)), x.sum(dim=(1, 2, 3))
    )
    assert not torch.equal(batch.inputs, protocol.eval_inputs(x))
    assert torch.equal(protocol.eval_inputs(x)[:, :, 6:34, 6:34], x)


@pytest.fixture
def affine_cfg(tmp_path):
    return compose(
        [
            "suite=affine",
            "budget=smoke",
            f"output_dir={tmp_path}",
            "tracking.enabled=false",
            "device=cpu",
            "train.epochs=3",
            "models=[cnn_9x9]",
        ]
    )


def test_training_stops_at_the_target_validation_accuracy(affine_cfg, tiny_splits):
    splits = tiny_splits
    protocol = SUITES.get("affine")().protocol(affine_cfg)
    affine_cfg.train.target_val_accuracy = 1.0  # % : reached after the first epoch
    torch.manual_seed(0)  # the initial weights must not depend on which tests ran before
    model = create_model("cnn_9x9", image_size=40, channels=(4, 4, 2), fc=(16,))
    meta = fit(model, splits, affine_cfg, protocol, seed=0)
    assert len(meta["history"]) == 1 and meta["reached_target"] and meta["best_epoch"] == 1
    with_target = training_identity(affine_cfg, "cnn_9x9", 0, splits, protocol)
    affine_cfg.train.target_val_accuracy = None
    without = training_identity(affine_cfg, "cnn_9x9", 0, splits, protocol)
    assert with_target["train"]["target_val_accuracy"] == 1.0 and "target_val_accuracy" not in without["train"]
    assert with_target["model_args"]["image_size"] == 40 and with_target["protocol"]["protocol"] == "canvas"
    meta = fit(model, splits, affine_cfg, protocol, seed=0)
    assert len(meta["history"]) == 3 and not meta["reached_target"]


def test_target_accuracy_out_of_range_is_a_config_error(tmp_path):
    with pytest.raises(CapsbenchError, match="target_val_accuracy"):
        compose(["suite=affine", f"output_dir={tmp_path}", "train.target_val_accuracy=0.99e3"])


@pytest.mark.parametrize("transform", SWEEPS)
def test_sweep_identity_points_are_exact_identities(transform):
    identity = {"rotation": 0.0, "scale": 1.0, "shear": 0.0, "translation": 0.0}[transform]
    matrix, shift = sweep_transform(transform, identity)
    assert torch.equal(matrix, torch.eye(2, dtype=torch.float64)) and (shift is None or not shift.any())


def test_sweep_at_identity_equals_centred_accuracy_and_records_name_the_test_set(affine_cfg, tiny_splits):
    splits = tiny_splits
    suite = SUITES.get("affine")()
    protocol = suite.protocol(affine_cfg)
    affine_cfg.params.sweep_images = None  # the sweep uses the same images as the centred accuracy
    torch.manual_seed(0)
    model = create_model(
        "capsnet", image_size=40, conv_channels=8, primary_types=2, class_dim=4, decoder_hidden=[]
    ).eval()
    test = AffineTestSet(protocol.eval_inputs(splits.test_x), splits.test_y, "affNIST-style sha256:0123")
    ctx = Context(
        model=model,
        model_name="capsnet",
        splits=splits,
        params=affine_cfg.params,
        device="cpu",
        batch_size=16,
        seed=0,
        protocol=protocol,
        resources=test,
    )
    records = suite.measure(ctx)
    centred = next(r["value"] for r in records if r["metric"] == "centred_accuracy")
    affnist = next(r for r in records if r["metric"] == "affnist_accuracy")
    assert affnist["test_set"] == "affNIST-style sha256:0123" and affnist["value"] == centred  # same images here
    sweeps = [r for r in records if r["metric"] == "sweep_accuracy"]
    assert {r["transform"] for r in sweeps} == set(SWEEPS)
    assert len(sweeps) == sum(len(affine_cfg.params[t]) for t in SWEEPS)
    zero = {"rotation": 0.0, "scale": 1.0, "shear": 0.0, "translation": 0.0}
    at_identity = [r["value"] for r in sweeps if r["magnitude"] == zero[r["transform"]]]
    assert len(at_identity) == 4 and all(v == centred for v in at_identity)
    preds = predict(model, splits.test_x, splits.test_y, batch_size=16, device="cpu", transform=protocol.eval_inputs)
    assert len(set(preds.tolist())) > 1, "the untrained model predicts one class: the identity check would be vacuous"
