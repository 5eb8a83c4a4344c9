"""Fixed, hand-chosen records for every suite (golden tables, LaTeX compilation): accuracies are k correct out of n
images (the first k), so paired tests and Wilson intervals are those of real records; published numbers as
`baselines.matching` returns them."""

from __future__ import annotations

from typing import Any

import numpy as np

from capsbench.suites.robustness.checks import sanity_flags
from capsbench.util.stats import accuracy_fields, error_fields


def acc(suite: str, model: str, metric: str, right: int, n: int, seed: int = 0, error: bool = False,
        **columns: Any) -> dict[str, Any]:
    ok = np.arange(n) < right
    fields = error_fields(ok) if error else accuracy_fields(ok)
    return {"suite": suite, "model": model, "dataset": "mnist", "seed": seed, "metric": metric, **fields, **columns}


def value(suite: str, model: str, metric: str, v: float, seed: int = 0, **columns: Any) -> dict[str, Any]:
    return {
        "suite": suite,
        "model": model,
        "dataset": "mnist",
        "seed": seed,
        "metric": metric,
        "value": float(v),
        **columns,
    }


def accuracy() -> list[dict[str, Any]]:
    rows = []
    for model, rights in {
        "capsnet": (9930, 9941, 9925),
        "cnn_sabour": (9902, 9911, 9899),
        "cnn_9x9": (9928, 9930, 9936),
    }.items():
        for seed, right in enumerate(rights):
            rows.append(acc("accuracy", model, "test_accuracy", right, 10000, seed))
            rows.append(acc("accuracy", model, "test_error", right, 10000, seed, error=True))
    return rows


def accuracy_published() -> list[dict[str, Any]]:
    return [
        {
            "model": "capsnet",
            "dataset": "mnist",
            "metric": "test_error",
            "value": 0.25,
            "std": 0.005,
            "footnote": "S. Sabour, N. Frosst, G. E. Hinton. Dynamic Routing Between Capsules. NeurIPS 2017 "
            "(arXiv:1710.09829), Table 1: 3 routing iterations, with reconstruction",
        },
        {
            "model": "cnn_sabour",
            "dataset": "mnist",
            "metric": "test_error",
            "value": 0.39,
            "std": None,
            "footnote": "S. Sabour, N. Frosst, G. E. Hinton. Dynamic Routing Between Capsules. NeurIPS 2017 "
            "(arXiv:1710.09829), Table 1: baseline CNN; 35.4 M parameters",
        },
    ]


EPS = (0.0, 0.1, 0.2, 0.3)
CURVES = {  # model -> attack reported alone -> images robust out of 200 at each eps
    "capsnet": {"fgsm": (198, 150, 92, 51), "apgd": (198, 125, 35, 2)},
    "cnn_sabour": {"fgsm": (199, 141, 60, 20), "apgd": (199, 120, 14, 0)},
    "effcapsnet": {"fgsm": (196, 170, 150, 140), "apgd": (196, 166, 138, 118)},
}
MARGINAL = {  # model -> ensemble attack -> images it broke that the attacks before it left, at eps 0.1, 0.2, 0.3
    "capsnet": {"apgd_targeted": (4, 3, 2), "pgd_adaptive": (7, 1, 0), "vote": (1, 0, 0), "square": (0,)},
    "cnn_sabour": {"apgd_targeted": (6, 2, 0), "square": (0,)},
    "effcapsnet": {"apgd_targeted": (2, 2, 2), "pgd_adaptive": (6, 6, 16), "vote": (1, 0, 0), "square": (70,)},
}
WORST = {"capsnet": (198, 113, 31, 0), "cnn_sabour": (199, 114, 12, 0), "effcapsnet": (196, 87, 60, 50)}
CLEAN = {"capsnet": 198, "cnn_sabour": 199, "effcapsnet": 196}


def robustness() -> list[dict[str, Any]]:
    rows = []
    for model, attacks in CURVES.items():
        mine = [acc("robustness", model, "clean_accuracy", CLEAN[model], 200)]
        for attack, rights in attacks.items():
            mine += [acc("robustness", model, "robust_accuracy", r, 200, attack=attack, eps=e)
                     for e, r in zip(EPS, rights)]
        for attack, broke in MARGINAL[model].items():
            mine += [acc("robustness", model, "marginal_breaks", k, 200, attack=attack, eps=e)
                     for e, k in zip(EPS[1:], broke)]
        for attack in ("pgd_adaptive", "vote"):
            if attack not in MARGINAL[model]:
                mine.append(value("robustness", model, "attack_skipped", 1, attack=attack,
                                  reason="not a capsule model: it has no squash to pass straight through"))
        mine += [acc("robustness", model, "robust_accuracy", r, 200, attack="worst_case", eps=e)
                 for e, r in zip(EPS, WORST[model])]
        # what the attacks cost, as the suite records it: per phase (every attack here is a row attack, so one pool
        # of the row engine) its images x eps per second, and the engine's counts over the unit
        mine.append(value("robustness", model, "attack_throughput", 900, attack="row_engine"))
        mine += [value("robustness", model, metric, count) for metric, count in
                 (("attack_iterates", 2100), ("attack_forward_calls", 2300), ("attack_host_reads", 2100))]
        flags = sanity_flags(mine, near_zero=1.0)
        mine += [value("robustness", model, "sanity_flag", float(f.fired), check=f.check) for f in flags]
        mine.append(value("robustness", model, "sanity_flags", sum(f.fired for f in flags)))
        rows += mine
    return rows


def affine() -> list[dict[str, Any]]:
    grids = {
        "rotation": (-90, -60, -45, -30, -15, 0, 15, 30, 45, 60, 90),
        "scale": (0.7, 1.0, 1.3),
        "shear": (-0.4, 0.0, 0.4),
        "translation": (-9, 0, 9),
    }
    rows = []
    for model, centred, aff, slope in (("capsnet", 985, 702, 4), ("cnn_sabour", 990, 611, 6)):
        rows.append(acc("affine", model, "centred_accuracy", centred, 1000))
        rows.append(
            acc("affine", model, "affnist_accuracy", aff, 1000, test_set="affNIST-style sha256:0123456789abcdef")
        )
        for transform, grid in grids.items():
            for i, m in enumerate(grid):
                distance = abs(i - grid.index(0 if transform != "scale" else 1.0))
                rows.append(
                    acc(
                        "affine",
                        model,
                        "sweep_accuracy",
                        300 - slope * 7 * distance,
                        300,
                        transform=transform,
                        magnitude=float(m),
                    )
                )
        grid = "rotation=-30:30:7 translation=-3:3:3 scale=1:1:1"
        rows.append(acc("affine", model, "grid_clean_accuracy", centred // 2, 500, grid=grid))
        for r in (0.0, 10.0, 20.0, 30.0):
            rows.append(acc("affine", model, "worst_affine_accuracy", centred // 2 - slope * int(r), 500,
                            max_rotation=r, grid=grid))
    return rows


def overlap() -> list[dict[str, Any]]:
    rows = []
    for model, both, digit, single, box in (
        ("capsnet", 9410, 19300, 9900, 81.3),
        ("cnn_multimnist", 9120, 19100, 9890, 81.3),
    ):
        rows.append(acc("overlap", model, "both_correct_accuracy", both, 10000))
        rows.append(acc("overlap", model, "both_correct_error", both, 10000, error=True))
        rows.append(acc("overlap", model, "per_digit_accuracy", digit, 20000))
        rows.append(acc("overlap", model, "single_digit_accuracy", single, 10000))
        rows.append(value("overlap", model, "box_overlap", box))
    return rows


def overlap_published() -> list[dict[str, Any]]:
    return [
        {
            "model": "capsnet",
            "dataset": "mnist",
            "metric": "both_correct_error",
            "value": 5.2,
            "std": None,
            "footnote": "S. Sabour, N. Frosst, G. E. Hinton. Dynamic Routing Between Capsules. NeurIPS 2017 "
            "(arXiv:1710.09829), Table 1: 3 routing iterations, with reconstruction",
        }
    ]


def routing() -> list[dict[str, Any]]:
    rows = []
    for r, right, latency in ((1, 9850, 2.1), (2, 9871, 2.9), (3, 9874, 3.8), (4, 9869, 4.6), (5, 9866, 5.5)):
        rows += [
            acc("routing", "capsnet", "test_accuracy", right, 10000, r=r),
            acc("routing", "capsnet", "test_error", right, 10000, error=True, r=r),
            value("routing", "capsnet", "latency", latency, r=r),
            value("routing", "capsnet", "throughput", 6000 / latency, r=r),
        ]
    rows += [
        acc("routing", "cnn_sabour", "test_accuracy", 9890, 10000),
        acc("routing", "cnn_sabour", "test_error", 9890, 10000, error=True),
        value("routing", "cnn_sabour", "latency", 1.2),
        value("routing", "cnn_sabour", "throughput", 9100.0),
    ]
    return rows


def efficiency() -> list[dict[str, Any]]:
    timing = {"device": "cpu (2 threads)", "dtype": "float32"}
    slope = "slope of median time over r=1..3"
    sizes = {  # model -> part -> (M params, M MACs, M elementwise ops)
        "capsnet": {
            "encoder": (0.0133, 1.64, 0.012),
            "routing": (0.0737, 0.0737, 0.0251),
            "decoder": (0.112, 0.112, 0.0009),
        },
        "cnn_sabour": {"encoder": (0.0302, 2.31, 0.0215)},
    }
    rows = []
    for model, parts in sizes.items():
        for i, (name, (p, m, e)) in enumerate(parts.items()):
            rows += [
                value("efficiency", model, "params", p, part=name),
                value("efficiency", model, "macs", m, part=name),
                value("efficiency", model, "elementwise_ops", e, part=name),
                value("efficiency", model, "module_macs", m, module=f"{name}_block{i}"),
            ]
        total = sum(v[1] for v in parts.values())
        rows += [
            value("efficiency", model, "params", sum(v[0] for v in parts.values()), part="total"),
            value("efficiency", model, "macs", total, part="total"),
            value("efficiency", model, "flops", 2 * total, part="total"),
            value("efficiency", model, "flopcounter_macs", total, part="total"),
        ]
        scale = 1.0 if model == "capsnet" else 0.6
        for mode in ("infer", "train"):
            for batch in (1, 64):
                peak = (310 if mode == "infer" else 420) * scale + batch
                rows.append(
                    value(
                        "efficiency",
                        model,
                        "peak_memory",
                        peak,
                        mode=mode,
                        batch=batch,
                        method="peak RSS, fresh process",
                        **timing,
                    )
                )
                rows.append(
                    value(
                        "efficiency",
                        model,
                        "step_memory",
                        peak - 300 * scale,
                        mode=mode,
                        batch=batch,
                        method="peak RSS, fresh process",
                        **timing,
                    )
                )
        rows += [
            value("efficiency", model, "latency", 3.1 * scale, batch=1, **timing),
            value("efficiency", model, "throughput", 2400 / scale, batch=64, **timing),
        ]
    rows.append(value("efficiency", "capsnet", "uncounted_op_calls", 3, op="aten::cumsum"))
    for batch, base in ((1, 0.21), (64, 4.2)):
        rows += [
            value("efficiency", "capsnet", "routing_latency", base * r, batch=batch, r=r, **timing) for r in (1, 2, 3)
        ]
        rows.append(
            value("efficiency", "capsnet", "routing_iteration_latency", base, batch=batch, method=slope, **timing)
        )
    return rows


def efficiency_published() -> list[dict[str, Any]]:
    return [
        {
            "model": "capsnet",
            "dataset": "mnist",
            "metric": "params",
            "part": "total",
            "value": 8.2,
            "std": None,
            "footnote": "S. Sabour, N. Frosst, G. E. Hinton. Dynamic Routing Between Capsules. NeurIPS 2017 "
            "(arXiv:1710.09829), Section 5: with the reconstruction decoder",
        }
    ]


DEFAULT_EPS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3)
DEFAULT_CURVES = {  # the default robustness run (budget quick): images robust out of 1,000 at each eps
    "capsnet": {"fgsm": (981, 913, 801, 652, 503, 371, 262), "pgd": (981, 880, 389, 41, 2, 0, 0),
                "pgd_adaptive": (981, 874, 377, 39, 2, 0, 0), "vote": (981, 890, 420, 70, 9, 1, 0)},
    "cnn_sabour": {"fgsm": (990, 940, 760, 520, 330, 190, 120), "pgd": (990, 900, 420, 60, 3, 0, 0)},
    "cnn_9x9": {"fgsm": (986, 921, 733, 498, 301, 170, 90), "pgd": (986, 870, 351, 30, 1, 0, 0)},
}


def robustness_default(models: tuple[str, ...] = tuple(DEFAULT_CURVES), images: int = 1000) -> list[dict[str, Any]]:
    """Records shaped as the default `capsbench run suite=robustness` writes them: three models, one seed, 1,000 test
    images (or `images`, the counts scaled), six eps above 0, the worst case over fgsm, pgd, pgd_adaptive and vote
    (capsule attacks skipped on CNNs) and square at eps 0.15."""
    rows = []
    for model in models:
        attacks = {a: tuple(r * images // 1000 + (images > 1000) * 3 for r in rights)
                   for a, rights in DEFAULT_CURVES[model].items()}
        mine = [acc("robustness", model, "clean_accuracy", attacks["fgsm"][0], images)]
        for attack, rights in attacks.items():
            mine += [acc("robustness", model, "robust_accuracy", r, images, attack=attack, eps=e)
                     for e, r in zip(DEFAULT_EPS, rights)]
        mine.append(acc("robustness", model, "robust_accuracy", attacks["pgd"][3] + images // 10, images,
                        attack="square", eps=0.15))
        mine += [value("robustness", model, "attack_skipped", 1, attack=a, reason="needs capsule poses")
                 for a in ("pgd_adaptive", "vote") if a not in attacks]
        mine += [acc("robustness", model, "robust_accuracy", min(r[i] for r in attacks.values()), images,
                     attack="worst_case", eps=e) for i, e in enumerate(DEFAULT_EPS)]
        flags = sanity_flags(mine, near_zero=1.0)
        mine += [value("robustness", model, "sanity_flag", float(f.fired), check=f.check) for f in flags]
        rows += mine
    return rows
