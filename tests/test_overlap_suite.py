"""The MultiMNIST protocol in training, CapsNet's per-digit reconstruction loss, and the overlap suite on tiny
models."""

import pytest
import torch
from composing import compose
from matplotlib.figure import Figure

from capsbench import create_model
from capsbench.errors import CapsbenchError
from capsbench.layers.capsules import margin_loss, reconstruction_loss
from capsbench.reporting.frame import records_frame
from capsbench.reporting.tables import build_tables
from capsbench.suites import SUITES, Context
from capsbench.train.evaluation import accuracy
from capsbench.train.loop import fit
from capsbench.train.multimnist_protocol import MultiMNISTProtocol
from capsbench.train.protocols import TrainingProtocol
from tests.conftest import make_splits
from tests.test_models import tiny_args


def test_train_batch_has_two_hot_targets_and_its_components():
    proto = MultiMNISTProtocol(cache_dir="unused")
    labels = torch.tensor([0, 1, 2, 3, 3, 5, 9, 9])
    batch = proto.train_batch(torch.rand(8, 1, 28, 28), labels, torch.Generator().manual_seed(0))
    assert batch.inputs.shape == (8, 1, 36, 36) and batch.components.shape == (8, 2, 1, 36, 36)
    assert (batch.targets.sum(dim=1) == 2).all()
    assert torch.equal(batch.component_labels[:, 0], labels)
    rows = torch.arange(8)
    assert (batch.targets[rows, batch.component_labels[:, 0]] == 1).all()
    assert (batch.targets[rows, batch.component_labels[:, 1]] == 1).all()
    assert torch.allclose(batch.inputs, batch.components.sum(dim=1).clamp(max=1))


def test_protocol_errors_name_the_fix():
    proto = MultiMNISTProtocol(cache_dir="unused")
    with pytest.raises(CapsbenchError, match="batch_size"):
        proto.train_batch(torch.rand(3, 1, 28, 28), torch.tensor([4, 4, 4]), torch.Generator())
    with pytest.raises(CapsbenchError, match="canvas >= 38"):
        MultiMNISTProtocol(canvas=36, max_shift=5, cache_dir="unused").input_size(28)
    with pytest.raises(CapsbenchError, match="saturating_sum"):
        MultiMNISTProtocol(merge="add", cache_dir="unused")
    with pytest.raises(CapsbenchError, match="test_pairs_per_digit must be >= 1"):
        proto.test_recipe(make_splits(), pairs_per_digit=0, seed=0)


def test_capsnet_reconstructs_each_digit_from_its_own_capsule():
    torch.manual_seed(0)
    model = create_model("capsnet", image_size=36, **tiny_args("capsnet"))
    proto = MultiMNISTProtocol(cache_dir="unused")
    batch = proto.train_batch(torch.rand(4, 1, 28, 28), torch.tensor([1, 2, 3, 4]), torch.Generator().manual_seed(0))
    out = model(batch.inputs, batch.targets)
    assert out.reconstructions is None  # two digits: reconstructions are made per component in the loss
    loss = model.loss(
        out, batch.targets, batch.inputs, components=batch.components, component_labels=batch.component_labels
    )
    expected = margin_loss(out.scores, batch.targets) + model.recon_weight * sum(
        reconstruction_loss(model.reconstruct(out.poses, batch.component_labels[:, k]), batch.components[:, k])
        for k in range(2)
    )
    assert torch.allclose(loss, expected)
    poses = torch.randn_like(out.poses)  # untrained poses are ~0; any non-degenerate poses show the masking
    first, second = (model.reconstruct(poses, batch.component_labels[:, k]) for k in range(2))
    assert not torch.allclose(first, second)  # each digit is decoded from its own class capsule


def test_default_validation_score_is_top1_accuracy(tiny_splits):
    model = create_model("cnn_sabour", **tiny_args("cnn_sabour"))
    expected = accuracy(model, tiny_splits.val_x, tiny_splits.val_y, batch_size=16, device="cpu")
    assert TrainingProtocol().validation_score(model, tiny_splits, batch_size=16, device="cpu") == expected


@pytest.fixture
def overlap_cfg(tmp_path):
    return compose(
        [
            "suite=overlap",
            "budget=smoke",
            f"output_dir={tmp_path}",
            "tracking.enabled=false",
            "train.epochs=1",
            "device=cpu",
            "params.test_pairs_per_digit=2",
            "params.figure_pairs=3",
        ]
    )


@pytest.mark.parametrize("name", ["capsnet", "cnn_multimnist"])
def test_suite_trains_and_measures_a_tiny_model(overlap_cfg, name):
    splits = make_splits(n_train=48, n_val=24, n_test=20)
    suite = SUITES.get("overlap")()
    proto = suite.protocol(overlap_cfg)
    torch.manual_seed(0)
    model = create_model(name, image_size=proto.input_size(28), **tiny_args(name))
    meta = fit(model, splits, overlap_cfg, proto, seed=0)
    assert 0.0 <= meta["best_val_accuracy"] <= 1.0
    ctx = Context(
        model=model.eval(),
        model_name=name,
        splits=splits,
        params=overlap_cfg.params,
        device="cpu",
        batch_size=16,
        seed=0,
        protocol=proto,
    )
    values = {r["metric"]: r["value"] for r in suite.measure(ctx)}
    assert set(values) == {m.name for m in suite.metrics}
    assert values["both_correct_accuracy"] + values["both_correct_error"] == pytest.approx(100.0)
    assert values["both_correct_accuracy"] <= values["per_digit_accuracy"] + 1e-9  # both found implies each found
    assert all(0.0 <= v <= 100.0 for v in values.values())
    figures = suite.figures(ctx)
    if model.is_capsule:
        assert isinstance(figures["segmentation"], Figure) and len(figures["segmentation"].axes) == 6
    else:
        assert figures == {}


def test_descriptive_metric_gets_no_best_cell():
    suite = SUITES.get("overlap")
    records = [
        {"suite": "overlap", "model": m, "dataset": "mnist", "seed": s, "metric": metric,
         "value": v + s / 10 + (0.3 if (m, s) == ("a", 1) else 0.0)}  # seeds that differ: a spread to test
        for m, acc in (("a", 90.0), ("b", 80.0))
        for s in (0, 1, 2)
        for metric, v in (("both_correct_accuracy", acc), ("box_overlap", 72.0 + acc / 100))
    ]
    [table] = build_tables(records_frame(records, suite), suite, suite.layout)
    assert {(table.rows[i][0], h.label) for h in table.headers for i in range(2) if table.is_best(i, h.key)} == {
        ("a", "both correct")
    }
