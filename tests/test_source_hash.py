"""The checkpoint key follows the code that trains a model: editing a model changes that model's key only, editing
shared training code changes every key, and editing code that cannot change weights (reports) changes none."""

import shutil
from pathlib import Path

import pytest

import capsbench
from capsbench import source_hash
from capsbench.checkpoints import content_key
from capsbench.protocols import TrainingProtocol
from capsbench.training import default_protocol, obtain_model, training_identity

MODELS = ("capsnet", "cnn_sabour")


@pytest.fixture
def package_copy(tmp_path, monkeypatch):
    """A copy of the capsbench package whose source the key is computed from."""
    copy = tmp_path / "capsbench"
    shutil.copytree(Path(capsbench.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(source_hash, "PACKAGE_DIR", copy)
    return copy


def _keys(cfg, splits) -> dict[str, str]:
    return {m: content_key(training_identity(cfg, m, 0, splits, default_protocol(cfg))) for m in MODELS}


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_editing_a_model_changes_only_its_key(smoke_cfg, tiny_splits, package_copy):
    before = _keys(smoke_cfg, tiny_splits)
    _edit(package_copy / "models" / "capsnet.py", "super().__init__()", "super().__init__()\n        self.edited = True")
    after = _keys(smoke_cfg, tiny_splits)
    assert after["capsnet"] != before["capsnet"] and after["cnn_sabour"] == before["cnn_sabour"]


def test_editing_a_module_a_model_imports_changes_its_key(smoke_cfg, tiny_splits, package_copy):
    before = _keys(smoke_cfg, tiny_splits)
    _edit(package_copy / "models" / "capsules.py", "SQUASH_EPS = 1e-8", "SQUASH_EPS = 1e-7")
    after = _keys(smoke_cfg, tiny_splits)
    assert after["capsnet"] != before["capsnet"] and after["cnn_sabour"] == before["cnn_sabour"]


@pytest.mark.parametrize("module", ["training.py", "data/augment.py", "data/minibatches.py", "protocols.py"])
def test_editing_shared_training_code_changes_every_key(smoke_cfg, tiny_splits, package_copy, module):
    before = _keys(smoke_cfg, tiny_splits)
    (package_copy / module).write_text((package_copy / module).read_text() + "\nEDITED = 1\n")
    after = _keys(smoke_cfg, tiny_splits)
    assert all(after[m] != before[m] for m in MODELS)


@pytest.mark.parametrize("module", ["reporting/tables.py", "cli.py", "tracking/writer.py", "attacks/pgd.py", "suites/robustness.py",
                                    "models/__init__.py", "data/catalog.py"])
def test_editing_code_that_cannot_change_weights_keeps_every_key(smoke_cfg, tiny_splits, package_copy, module):
    before = _keys(smoke_cfg, tiny_splits)
    (package_copy / module).write_text((package_copy / module).read_text() + "\n\ndef added() -> int:\n    return 1\n")
    assert _keys(smoke_cfg, tiny_splits) == before


def test_comments_and_docstrings_do_not_count(smoke_cfg, tiny_splits, package_copy):
    before = _keys(smoke_cfg, tiny_splits)
    path = package_copy / "models" / "capsnet.py"
    _edit(path, '"""Sabour et al.', '# a new comment\n"""Reworded: Sabour et al.')
    assert _keys(smoke_cfg, tiny_splits) == before


def test_the_closure_holds_the_model_training_and_data_code_only():
    roots = source_hash.training_roots("capsbench.models.capsnet:CapsNet", TrainingProtocol(max_shift=2), None)
    files = source_hash.weight_sources(roots)
    assert {"capsbench/models/capsnet.py", "capsbench/models/routing.py", "capsbench/models/capsules.py",
            "capsbench/models/base.py", "capsbench/training.py", "capsbench/train_step.py", "capsbench/protocols.py",
            "capsbench/evaluation.py", "capsbench/adversarial_training.py",
            "capsbench/data/augment.py", "capsbench/data/minibatches.py", "capsbench/data/datasets.py"} <= set(files)
    assert not any(f.startswith(("capsbench/suites", "capsbench/cost", "capsbench/reporting")) or f.endswith(("cnn.py",
                   "checkpoints.py", "config.py", "__init__.py")) for f in files)


def test_checkpoint_meta_records_the_key_inputs(smoke_cfg, tiny_splits):
    import torch

    trained = obtain_model(smoke_cfg, "cnn_9x9", 0, tiny_splits)
    identity = trained.meta["identity"]
    assert identity["torch"] == str(torch.__version__) and identity["capsbench"] == capsbench.__version__
    assert len(identity["source"]["hash"]) == 64 and "capsbench/models/cnn.py" in identity["source"]["files"]
    assert trained.key == content_key(identity)
