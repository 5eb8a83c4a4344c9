"""What a report says about a run's settings: only those that differ from its budget's defaults and apply to it (no
launcher settings of another launcher, no paths, no parameters of another dataset), so its appendix stays short."""

from __future__ import annotations

import functools
from collections.abc import Mapping

from capsbench.config.compose import compose, to_dict
from capsbench.config.request import Request
from capsbench.data import DATASETS
from capsbench.errors import CapsbenchError
from capsbench.tracking import flatten

# Said elsewhere in the report (suite, budget, dataset, models, seeds, device, threads) or where, not what: never listed
SHOWN_ELSEWHERE = ("suite", "budget", "dataset", "models", "seeds", "device", "threads", "output_dir", "cache_dir",
                   "retrain", "remeasure", "launcher", "data.root", "data.download")
WHERE_PREFIXES = ("tracking.", "weights.")  # a store, a weights file's path: the records name the weights by hash
LAUNCHERS = ("ray", "slurm")  # <launcher>.* settings apply only to runs with that launcher


def changed_settings(params: Mapping[str, str], suite: str, budget: str) -> dict[str, str]:
    """The run's settings (its parent run's params, as logged) that differ from what `capsbench run suite=<suite>
    budget=<budget> dataset=<its dataset>` would use, leaving out what does not apply to it."""
    dataset = params.get("dataset", "mnist")
    defaults = _defaults(suite, budget, dataset)
    launcher = params.get("launcher", "local")
    out = {}
    for key, value in params.items():
        first, _, rest = key.partition(".")
        if key in SHOWN_ELSEWHERE or key.startswith(WHERE_PREFIXES):
            continue
        if first in LAUNCHERS and first != launcher:
            continue
        if key.rsplit(".", 1)[-1] in DATASETS.names() and key.rsplit(".", 1)[-1] != dataset and first == "params":
            continue  # e.g. params.eps.fashion_mnist of an MNIST run
        if defaults.get(key) != value:
            out[key] = value
    return dict(sorted(out.items()))


@functools.cache
def _defaults(suite: str, budget: str, dataset: str) -> dict[str, str]:
    """The flat settings of a run of `suite` at `budget` on `dataset` with nothing else given, as MLflow logs them."""
    try:
        cfg = compose(Request({"suite": suite, "budget": budget, "dataset": dataset}), resolve_device=False)
    except CapsbenchError:  # a suite or budget this capsbench no longer has: every setting is shown
        return {}
    return {k: str(v) for k, v in flatten(to_dict(cfg)).items()}
