"""An attack-strength check that can fail: on a small capsule model and a small CNN trained on real MNIST, the
robustness suite's per-image worst case under its default attacks must leave no more images robust than an independent
reference attack (benchmarks/attack_strength.py: 100-step APGD-DLR, untargeted and targeted at every other class, on
the raw class evidence, written without capsbench.attacks), give or take one image, and may miss almost none of the
images the reference breaks. A change that weakens the ensemble or the adaptive attacks fails here."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from composing import compose

from capsbench.data import as_images
from capsbench.run.execute import load_data, trained
from capsbench.run.plan import plan
from capsbench.suites import SUITES, Context
from capsbench.util.stats import decode_outcomes

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "attack_strength.py"
EPS = (0.05, 0.1)


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("attack_strength", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.parametrize("model_name", ["capsnet", "cnn_sabour"])
def test_the_worst_case_is_as_strong_as_a_multi_targeted_reference(tmp_path, mnist_root, bench, model_name):
    # the default job's steps, with APGD-T towards every other class: with the quick budget's 3 targets one of the two
    # smoke models failed this check (21 robust against 19 at eps 0.1), and the quick CNN rows are 1-2 points above
    # this reference (results/robustness-quick-cpu2.md)
    quick = compose(["suite=robustness", f"output_dir={tmp_path}"]).params.attack_args
    steps = [f"params.attack_args.{a}.steps={quick[a].steps}" for a in ("pgd", "pgd_adaptive", "vote", "apgd",
                                                                          "apgd_targeted")]
    cfg = compose(["suite=robustness", "budget=smoke", f"models=[{model_name}]", f"output_dir={tmp_path}",
                   "tracking.enabled=false", f"data.root={mnist_root}", "data.download=false", "device=cpu",
                   "data.test_subset=60", *steps,
                   f"params.eps.mnist=[0,{','.join(map(str, EPS))}]", f"params.blackbox_eps.mnist={EPS[-1]}"])
    [unit] = plan(cfg)
    model = trained(unit).model.eval()
    ucfg = unit.run_config()
    splits = load_data(ucfg.dataset, ucfg.data)
    suite = SUITES.get("robustness")()
    ctx = Context(model=model, model_name=model_name, splits=splits, params=ucfg.params, device="cpu",
                  batch_size=500, seed=0, protocol=suite.protocol(ucfg), resources=suite.prepare(ucfg, splits))
    records = suite.measure(ctx)
    n = len(splits.test_y)
    clean = decode_outcomes(next(r for r in records if r["metric"] == "clean_accuracy")["outcomes"], n)
    ids = np.flatnonzero(clean)
    images = as_images(splits.test_x[ids], "cpu")
    for eps in EPS:
        ours = decode_outcomes(next(r["outcomes"] for r in records if r["metric"] == "robust_accuracy"
                                    and r.get("attack") == "worst_case" and r["eps"] == eps), n)
        reference = clean.copy()
        reference[ids[bench.reference_attack(model, images, splits.test_y[ids], eps, 100).numpy()]] = False
        assert 0 < reference.sum() < clean.sum(), f"eps {eps}: the check needs images both robust and broken"
        only_reference = int((ours & ~reference).sum())
        slack = max(1, n // 100)
        assert ours.sum() <= reference.sum() + slack, f"eps {eps}: {ours.sum()} robust, reference {reference.sum()}"
        assert only_reference <= slack, f"eps {eps}: {only_reference} images broken by the reference only"
