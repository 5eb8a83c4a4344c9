"""The checkpoint key follows the code that trains a model: editing a model changes that model's key only, editing
shared training code changes every key, and editing code that cannot change weights (reports) changes none."""

import shutil
from pathlib import Path

import pytest

import capsbench
from capsbench.train.protocols import TrainingProtocol
from capsbench.train.trained import default_protocol, obtain_model, training_identity
from capsbench.util import hashing
from capsbench.util.hashing import content_key

MODELS = ("capsnet", "cnn_sabour")
NOT_HASHED = ("capsbench.models", "capsbench.data", "capsbench.train")  # package faces: registries, no weights


@pytest.fixture
def package_copy(tmp_path, monkeypatch):
    """A copy of the capsbench package whose source the key is computed from."""
    copy = tmp_path / "capsbench"
    shutil.copytree(Path(capsbench.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(hashing, "PACKAGE_DIR", copy)
    return copy


def _keys(cfg, splits) -> dict[str, str]:
    return {m: content_key(training_identity(cfg, m, 0, splits, default_protocol(cfg))) for m in MODELS}


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


def test_editing_a_model_changes_only_its_key(smoke_cfg, tiny_splits, package_copy):
    before = _keys(smoke_cfg, tiny_splits)
    _edit(
        package_copy / "models" / "capsnet.py", "super().__init__()", "super().__init__()\n        self.edited = True"
    )
    after = _keys(smoke_cfg, tiny_splits)
    assert after["capsnet"] != before["capsnet"] and after["cnn_sabour"] == before["cnn_sabour"]


def test_editing_a_module_a_model_imports_changes_its_key(smoke_cfg, tiny_splits, package_copy):
    before = _keys(smoke_cfg, tiny_splits)
    _edit(package_copy / "layers" / "capsules.py", "SQUASH_EPS = 1e-8", "SQUASH_EPS = 1e-7")
    after = _keys(smoke_cfg, tiny_splits)
    assert after["capsnet"] != before["capsnet"] and after["cnn_sabour"] == before["cnn_sabour"]


@pytest.mark.parametrize(
    "module",
    [
        "train/loop.py",
        "train/trained.py",
        "train/step.py",
        "data/augment.py",
        "data/minibatches.py",
        "train/protocols.py",
    ],
)
def test_editing_shared_training_code_changes_every_key(smoke_cfg, tiny_splits, package_copy, module):
    before = _keys(smoke_cfg, tiny_splits)
    (package_copy / module).write_text((package_copy / module).read_text() + "\nEDITED = 1\n")
    after = _keys(smoke_cfg, tiny_splits)
    assert all(after[m] != before[m] for m in MODELS)


@pytest.mark.parametrize(
    "module",
    [
        "reporting/tables.py",
        "cli.py",
        "tracking/writer.py",
        "attacks/pgd.py",
        "suites/robustness/suite.py",
        "models/__init__.py",
        "data/catalog.py",
        "train/checkpoints.py",
        "util/progress.py",
    ],
)
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
    roots = hashing.training_roots("capsbench.models.capsnet:CapsNet", TrainingProtocol(max_shift=2), None)
    files = hashing.weight_sources(roots)
    assert {
        "capsbench.models.capsnet",
        "capsbench.layers.routing",
        "capsbench.layers.capsules",
        "capsbench.models.base",
        "capsbench.train.trained",
        "capsbench.train.loop",
        "capsbench.train.step",
        "capsbench.train.protocols",
        "capsbench.train.evaluation",
        "capsbench.train.adversarial",
        "capsbench.data.augment",
        "capsbench.data.minibatches",
        "capsbench.data.datasets",
    } <= set(files)
    assert not any(
        f.startswith(
            ("capsbench.suites", "capsbench.cost", "capsbench.reporting", "capsbench.config", "capsbench.util")
        )
        or f.endswith(("cnn", "checkpoints"))
        or f in NOT_HASHED
        for f in files
    )


def test_checkpoint_meta_records_the_key_inputs(smoke_cfg, tiny_splits):
    import torch

    trained = obtain_model(smoke_cfg, "cnn_9x9", 0, tiny_splits)
    identity = trained.meta["identity"]
    assert identity["torch"] == str(torch.__version__) and identity["capsbench"] == capsbench.__version__
    assert len(identity["source"]["hash"]) == 64 and "capsbench.models.cnn" in trained.meta["source_files"]
    assert trained.key == content_key(identity)


def _move(package: Path, old: str, new: str) -> None:
    """Move module `old` to `new` (paths relative to the package) and rewrite every import of it, as a refactor
    would."""
    dotted = lambda rel: "capsbench." + rel.removesuffix(".py").replace("/", ".")  # noqa: E731
    (package / new).parent.mkdir(parents=True, exist_ok=True)
    (package / old).rename(package / new)
    for path in package.rglob("*.py"):
        text = path.read_text()
        if dotted(old) in text:
            path.write_text(text.replace(dotted(old), dotted(new)))


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("train/step.py", "train/fast_step.py"),
        ("layers/capsules.py", "models/capsule_layers.py"),
        ("data/augment.py", "data/shift.py"),
    ],
)
def test_moving_or_renaming_a_module_keeps_every_key(smoke_cfg, tiny_splits, package_copy, old, new):
    before = _keys(smoke_cfg, tiny_splits)
    _move(package_copy, old, new)
    assert hashing.source_identity(
        hashing.training_roots("capsbench.models.capsnet:CapsNet", TrainingProtocol(), None), package_copy
    )[1]  # the moved copy is what is read
    assert _keys(smoke_cfg, tiny_splits) == before


def test_a_move_that_changes_code_changes_the_key(smoke_cfg, tiny_splits, package_copy):
    before = _keys(smoke_cfg, tiny_splits)
    _move(package_copy, "train/step.py", "train/fast_step.py")
    _edit(package_copy / "train" / "fast_step.py", "loss.backward()", "(2 * loss).backward()")
    assert _keys(smoke_cfg, tiny_splits) != before
