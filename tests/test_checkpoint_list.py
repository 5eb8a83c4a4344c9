"""`capsbench list checkpoints`: one line per finished checkpoint from its JSON sidecar (without torch), the same row
from the checkpoint itself when the sidecar is missing, and --format json."""

import json

import pytest

from capsbench.config.request import parse_command_line
from capsbench.errors import CapsbenchError
from capsbench.run.checkpoint_list import cache_directory, list_checkpoints
from capsbench.train.checkpoints import CheckpointCache
from capsbench.train.trained import obtain_model


@pytest.fixture
def cache(smoke_cfg, tiny_splits):
    """A cache holding two finished checkpoints (cnn_9x9 seeds 0 and 1) and one resume file."""
    trained = [obtain_model(smoke_cfg, "cnn_9x9", seed, tiny_splits) for seed in (0, 1)]
    CheckpointCache(smoke_cfg.cache_dir).save_partial("0" * 20, {"model": {}, "epoch": 0})
    return smoke_cfg.cache_dir, trained


def test_sidecars_describe_each_checkpoint(cache):
    directory, trained = cache
    for t in trained:
        side = json.loads((t.path.with_suffix(".json")).read_text())
        assert side["key"] == t.key and side["identity"] == json.loads(json.dumps(t.meta["identity"]))
        assert side["size"] == t.path.stat().st_size


def test_list_text_and_json_without_torch(cache, tmp_path, cli_probe):
    directory, trained = cache
    text = cli_probe(["list", "checkpoints", f"cache_dir={directory}"], cwd=tmp_path)
    assert text.code == 0 and text.heavy == []
    header, *lines = text.stdout.strip().splitlines()
    assert (
        header.split()[:4] == ["key", "model", "dataset", "seed"] and len(lines) == 2
    )  # the resume file is not listed
    by_key = {line.split()[0]: line.split() for line in lines}  # rows are ordered by creation time, then key
    for t in trained:
        cols = by_key[t.key]
        source = t.meta["identity"]["source"]["hash"][:10]
        assert cols[:4] == [t.key, "cnn_9x9", "synthetic", str(t.meta["identity"]["seed"])] and source in cols
    rows = json.loads(
        cli_probe(["list", "checkpoints", f"cache_dir={directory}", "--format", "json"], cwd=tmp_path).stdout
    )
    assert sorted(r["key"] for r in rows) == sorted(t.key for t in trained)
    row = next(r for r in rows if r["key"] == trained[0].key)
    assert row["best_val_accuracy"] == pytest.approx(100 * trained[0].meta["best_val_accuracy"])
    assert row["epochs"] == 1 and row["lr"] == 0.003 and row["torch"] == trained[0].meta["identity"]["torch"]


@pytest.mark.parametrize("edit", [
    lambda side: side.update(identity="garbage"),
    lambda side: side["identity"].update(train={"lr": "fast"}, source={"hash": 5}),
    lambda side: side.update(best_val_accuracy="0.9"),
], ids=["identity a string", "wrong types inside", "accuracy a string"])
def test_a_sidecar_edited_out_of_its_shape_is_read_from_the_file(cache, edit):
    """A sidecar of the checkpoint's size and time but not of the shape capsbench writes (edited by hand or another
    program) is not trusted: the row comes from the checkpoint, as without a sidecar."""
    from pathlib import Path

    directory, trained = cache
    before = list_checkpoints(Path(directory))
    side_path = trained[0].path.with_suffix(".json")
    side = json.loads(side_path.read_text())
    edit(side)
    side_path.write_text(json.dumps(side))
    assert list_checkpoints(Path(directory)) == before


def test_a_checkpoint_without_sidecar_is_read_from_the_file(cache):
    directory, trained = cache
    from pathlib import Path

    before = list_checkpoints(Path(directory))
    trained[0].path.with_suffix(".json").unlink()
    assert list_checkpoints(Path(directory)) == before
    assert not trained[0].path.with_suffix(".json").exists()  # listing never writes
    assert CheckpointCache(directory).load(trained[0].key) is not None
    assert trained[0].path.with_suffix(".json").exists()  # a cache hit restores it


def test_cache_directory_follows_run_defaults(tmp_path, monkeypatch):
    monkeypatch.delenv("CAPSBENCH_CACHE", raising=False)
    assert cache_directory(parse_command_line([f"output_dir={tmp_path}"])) == tmp_path / "checkpoints"
    assert cache_directory(parse_command_line([f"cache_dir={tmp_path}/c"])) == tmp_path / "c"
    monkeypatch.setenv("CAPSBENCH_CACHE", str(tmp_path / "env"))
    assert cache_directory(parse_command_line([])) == tmp_path / "env"
    with pytest.raises(CapsbenchError, match="did you mean 'cache_dir'"):
        cache_directory(parse_command_line(["cache_dri=x"]))
    (tmp_path / "afile").touch()  # a file is no cache: "no checkpoints in <file>" read as an empty cache
    with pytest.raises(CapsbenchError, match=r"cache_dir \S+/afile is no directory: point cache_dir="):
        cache_directory(parse_command_line([f"cache_dir={tmp_path}/afile"]))
