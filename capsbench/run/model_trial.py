"""External models and external weights meet real data before anything is measured or written: before a run, each is
imported, built and loaded strictly (a weights file that does not fit is found before any data is read, within
seconds), then given one real batch (a bad module, weights file or output is one error, exit 2); `capsbench
check-model` runs the whole contract (capsbench.run.model_check) and reports what the model costs."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import SimpleNamespace

import torch
from omegaconf import DictConfig

from capsbench.cost.macs import count_macs, parameter_counts
from capsbench.data import DATASETS, as_images
from capsbench.errors import CapsbenchError
from capsbench.models import Classifier, create_model
from capsbench.run.execute import load_data
from capsbench.run.external import ensure_registered
from capsbench.run.model_check import (
    Finding,
    determinism_finding,
    gradient_finding,
    hook_findings,
    input_range_finding,
    output_findings,
)
from capsbench.run.plan import training_unit
from capsbench.run.units import UnitSpec
from capsbench.suites import SUITES
from capsbench.train.external import external_model
from capsbench.train.trained import external_weights, model_config

log = logging.getLogger(__name__)
TRIAL_IMAGES = 16  # test images each external model sees before a run
CHECK_IMAGES = 256  # test images `capsbench check-model` uses (the input-range check compares accuracies on them)
WAIT_NOTE_S = 10.0  # while a model's code keeps its check waiting, a line this often says so (a hang is never silent)


def try_external_models(units: list[UnitSpec]) -> None:
    """Build every external model and model with external weights of the units once per (model, arguments, weights),
    on the CPU, all before any data is read (a weights file that does not fit is told within seconds); then put the
    first test images of each dataset through them. The first problem is a CapsbenchError."""
    models: dict[str, tuple[UnitSpec, Classifier]] = {}
    for unit in units:
        if "external" not in unit.config and "weights" not in unit.config:
            continue
        key = json.dumps([unit.model, unit.suite, unit.config.get("weights"), unit.config["model_args"],
                          unit.dataset, unit.config["data"]], sort_keys=True, default=str)
        if key not in models:
            log.info("checking model %r on %d %s test images before any work (import, build, one forward pass)",
                     unit.model, TRIAL_IMAGES, unit.dataset)
            ensure_registered(unit.model, unit.config)
            with _watched(f"checking model {unit.model!r} (its import, constructor or forward pass on {TRIAL_IMAGES} "
                          "images has not returned)"):
                models[key] = unit, _model(unit.run_config(), unit)
    for unit, model in models.values():
        cfg = unit.run_config()
        splits = load_data(cfg.dataset, cfg.data)  # outside the watch: what it waits for is the model
        images = SUITES.get(unit.suite)().protocol(cfg).eval_inputs(as_images(splits.test_x[:TRIAL_IMAGES]))
        with _watched(f"checking model {unit.model!r} (its import, constructor or forward pass on {TRIAL_IMAGES} "
                      "images has not returned)"):
            findings = output_findings(model, images, splits.spec.num_classes, unit.model)
        for finding in findings:
            if finding.ok is False:
                raise CapsbenchError(f"model {unit.model!r} on {cfg.dataset}: {finding.text}")


@contextmanager
def _watched(what: str) -> Iterator[None]:
    """While the block runs, a warning every WAIT_NOTE_S seconds saying that it is still `what` (from a thread: the
    block may be stuck in a model's code)."""
    done, start = threading.Event(), time.monotonic()

    def note() -> None:
        while not done.wait(WAIT_NOTE_S):
            log.warning("still %s after %.0f s; Ctrl-C stops", what, time.monotonic() - start)

    threading.Thread(target=note, name="capsbench-watch", daemon=True).start()
    try:
        yield
    finally:
        done.set()


@dataclass
class CheckReport:
    """What `capsbench check-model` found, and what the model costs per image."""

    findings: list[Finding]
    params: int
    macs: int
    trained: bool

    @property
    def passed(self) -> bool:
        return all(f.ok is not False for f in self.findings)


def check_model(cfg: DictConfig, name: str) -> CheckReport:
    """The whole contract of model `name` (with its weights.<name> file, if given) on cfg.dataset's first test
    images."""
    unit = training_unit(cfg, name, 0)
    ensure_registered(name, unit.config)
    unit_cfg = unit.run_config()
    model, images, labels = _built(unit_cfg, unit, CHECK_IMAGES)
    trained = external_weights(unit_cfg) is not None
    findings = output_findings(model, images, load_data(unit_cfg.dataset, unit_cfg.data).spec.num_classes, name)
    if all(f.ok for f in findings):
        findings.append(input_range_finding(model, images, labels, name) if trained else
                        Finding("inputs in [0, 1]", None, "not checked without trained weights (give weights=PATH)"))
        findings += [determinism_finding(model, images, name), gradient_finding(model, images[:32], labels[:32]),
                     *hook_findings(model, images[:32], name)]
    macs = count_macs(model, tuple(images.shape[1:])).total_macs
    return CheckReport(findings, parameter_counts(model)["total"], int(macs), trained)


def _built(cfg: DictConfig, unit: UnitSpec, n: int) -> tuple[Classifier, torch.Tensor, torch.Tensor]:
    """The unit's model on the CPU (external weights loaded, else freshly initialised) and the first n test images as
    the model sees them, with their labels; the model is built and loaded before the data is read."""
    model = _model(cfg, unit)
    splits = load_data(cfg.dataset, cfg.data)
    protocol = SUITES.get(unit.suite)().protocol(cfg)
    images = protocol.eval_inputs(as_images(splits.test_x[:n]))
    return model, images, splits.test_y[:n]


def _model(cfg: DictConfig, unit: UnitSpec) -> Classifier:
    """The unit's model on the CPU in eval mode, built from its dataset's description alone (no data is read): with its
    external weights loaded strictly, else freshly initialised."""
    cfg.device = "cpu"
    described = SimpleNamespace(name=cfg.dataset, spec=DATASETS.get(cfg.dataset))  # what building reads of the splits
    protocol = SUITES.get(unit.suite)().protocol(cfg)
    if external_weights(cfg) is not None:
        model = external_model(cfg, unit.model, unit.seed, described, protocol)
    else:
        torch.manual_seed(unit.seed)
        model = create_model(unit.model, **model_config(cfg, unit.model, described, protocol))
    return model.eval()
