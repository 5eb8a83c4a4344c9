"""Every registered suite, with no test edit: measured on its test model at a tiny size (a few hundred real MNIST
images, one epoch) through capsbench.evaluate, its records keep the contract (declared metrics, every accuracy of a
model with n and an interval), and its tables render from them."""

from __future__ import annotations

import pytest

import capsbench
from capsbench.suites import SUITES

TINY = {"budget": "smoke", "seeds": [0], "data.train_subset": 256, "data.val_subset": 64, "data.test_subset": 32,
        "train.epochs": 1, "tracking.enabled": False}


@pytest.mark.parametrize("name", SUITES.names())
def test_every_suite_measures_a_tiny_model_and_renders_its_tables(name, tmp_path, mnist_root):
    suite = SUITES.get(name)
    result = capsbench.evaluate(suite.test_model, name, progress=False, output_dir=str(tmp_path / "out"),
                                cache_dir=str(tmp_path / "ckpt"), **{"data.root": str(mnist_root), **TINY})
    assert not result.missing and len(result.records), result.missing
    declared = {m.name: m for m in suite.metrics}
    for r in result.records.to_dict("records"):
        assert r["metric"] in declared, f"{name} recorded an undeclared metric {r['metric']!r}"
        metric = declared[r["metric"]]
        if metric.unit == "%" and metric.higher_is_better is not None:  # a model's accuracy, not the data's
            assert r["n"] > 0 and r["ci_low"] <= r["value"] <= r["ci_high"], r
    assert result.markdown.strip() and result.paths["table.md"].is_file() and result.paths["table.tex"].is_file()
