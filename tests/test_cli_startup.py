"""The quick commands (--help, --version, list, show-config) never import torch or the other heavy libraries,
and their --format json output is what the registries hold."""

import dataclasses
import json
from importlib import metadata

import pytest

from capsbench import __version__
from capsbench.data import DATASETS
from capsbench.models import MODELS
from capsbench.suites import CATALOG


@pytest.mark.parametrize("args", [
    ["--help"],
    ["--version"],
    ["list", "models"],
    ["list", "datasets"],
    ["list", "suites", "--format", "json"],
    ["show-config", "suite=robustness"],
    ["show-config", "suite=efficiency", "budget=smoke", "--format", "json"],
    ["run", "--help"],
])
def test_quick_commands_import_no_heavy_library(args, tmp_path, cli_probe):
    probe = cli_probe(args, cwd=tmp_path)
    assert probe.code == 0, probe.stderr
    assert probe.heavy == []
    assert list(tmp_path.iterdir()) == []  # and write nothing


def test_version_is_the_package_version(tmp_path, cli_probe):
    probe = cli_probe(["--version"], cwd=tmp_path)
    assert probe.stdout.strip() == f"capsbench {__version__}" and __version__ == metadata.version("capsbench")


def test_list_json_matches_the_registries(tmp_path, cli_probe):
    models = json.loads(cli_probe(["list", "models", "--format", "json"], cwd=tmp_path).stdout)
    assert [m["name"] for m in models] == MODELS.names()
    capsnet = next(m for m in models if m["name"] == "capsnet")
    assert capsnet["arguments"]["routing_iterations"] == 3 and capsnet["class"] == "capsbench.models.capsnet:CapsNet"
    datasets = json.loads(cli_probe(["list", "datasets", "--format", "json"], cwd=tmp_path).stdout)
    assert {d["name"]: d["image_size"] for d in datasets} == {n: DATASETS.get(n).image_size for n in DATASETS}
    suites = json.loads(cli_probe(["list", "suites", "--format", "json"], cwd=tmp_path).stdout)
    assert [s["name"] for s in suites] == CATALOG.names()
    robustness = next(s for s in suites if s["name"] == "robustness")["params"]
    assert robustness == dataclasses.asdict(CATALOG.get("robustness").params())
    assert robustness["attacks"] == ["fgsm", "apgd"] and robustness["attack_args"] == {}  # defaults: the attacks' own


def test_show_config_json_is_the_composed_config(tmp_path, cli_probe):
    probe = cli_probe(
        ["show-config", "suite=accuracy", "budget=smoke", "seeds=[1,2]", "--format", "json"], cwd=tmp_path
    )
    cfg = json.loads(probe.stdout)
    assert cfg["seeds"] == [1, 2] and cfg["data"]["train_subset"] == 3000 and cfg["device"] == "auto"


def test_unknown_format_is_refused(tmp_path, cli_probe):
    probe = cli_probe(["list", "models", "--format", "yaml"], cwd=tmp_path)
    assert probe.code == 2 and "--format" in probe.stderr and "json" in probe.stderr


def test_arguments_read_from_source_equal_the_constructors():
    """The registry reads each model's keyword arguments with ast; they must be what Python sees."""
    import inspect

    for name in MODELS:
        spec = MODELS.get(name)
        params = inspect.signature(spec.cls.__init__).parameters.values()
        real = {p.name: spec.defaults.get(p.name, p.default) for p in params if p.kind == p.KEYWORD_ONLY}
        assert spec.arguments() == real, name


def test_suite_catalog_matches_the_suite_classes():
    for name in CATALOG:
        entry, cls = CATALOG.get(name), CATALOG.get(name).load()
        assert (cls.name, cls.description, cls.Params) == (name, entry.description, entry.params)
