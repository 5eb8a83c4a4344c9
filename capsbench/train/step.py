"""How a training step runs: CPU intra-op threads, torch.compile, bf16 autocast (CUDA, or a CPU with bf16 instructions).

None of these changes the maths. compile and bf16 change rounding, so they are part of the checkpoint key;
the thread count can change the summation order of convolutions, so it is recorded with the checkpoint.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

import torch
from omegaconf import DictConfig

from capsbench.errors import CapsbenchError
from capsbench.models import Classifier, ModelOutput
from capsbench.train.protocols import Batch
from capsbench.util.precision import autocast, check_train_precision

log = logging.getLogger(__name__)

CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2 CPU quota: "<quota> <period>" or "max <period>"


def cpu_quota(path: Path = CGROUP_CPU_MAX) -> int | None:
    """CPUs a cgroup v2 quota allows (rounded up), or None without a quota (or outside Linux cgroups v2)."""
    if not path.is_file():
        return None
    quota, _, period = path.read_text().strip().partition(" ")
    if quota == "max" or not period:
        return None
    return max(1, math.ceil(int(quota) / int(period)))


def auto_threads() -> int:
    """The intra-op threads a unit uses unless `threads=N` says otherwise: torch's default (the physical cores,
    or OMP_NUM_THREADS), capped by the CPUs this process may run on (affinity mask, cgroup quota).

    More threads than CPUs is what hurts: measured on a 2-core machine shared with other jobs, 2 spinning
    OpenMP threads made a CapsNet step 3-7x slower than 1 thread (see capsbench/__init__.py for the wait policy).
    """
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = cpu_quota()
    return max(1, min(torch.get_num_threads(), allowed, quota or allowed))


def check_train_settings(train: DictConfig, device: str, where: str = "train") -> None:
    """Raise a CapsbenchError naming the key when precision or compile cannot run on `device`."""
    check_train_precision(train, device, where)
    if train.compile and not torch._dynamo.is_dynamo_supported():
        raise CapsbenchError(f"{where}.compile=true, but torch.compile does not support this Python/platform "
                             f"(torch {torch.__version__}); set {where}.compile=false")


class TrainStep:
    """One optimization step: forward + loss (torch.compile'd when asked) under the precision's autocast, then
    backward and the optimizer step. Batches of a MultiMNIST-style protocol pass their components to the loss.

    Args:
        model, optimizer: what is trained.
        device: where the model lives ("cpu", "cuda", ...).
        compile_model: torch.compile the forward + loss (inductor); the model's own forward stays eager
            elsewhere (validation, attacks).
        precision: "fp32", or "bf16" autocast (routing keeps softmax and squash in fp32; the losses stay fp32).
    """

    def __init__(self, model: Classifier, optimizer: torch.optim.Optimizer, *, device: str,
                 compile_model: bool = False, precision: str = "fp32") -> None:
        self.model, self.optimizer, self.device, self.precision = model, optimizer, device, precision
        self.compiled = compile_model
        self._forward_loss = torch.compile(self._eager_forward_loss) if compile_model else self._eager_forward_loss

    def _eager_forward_loss(self, inputs: torch.Tensor, targets: torch.Tensor, components: torch.Tensor | None,
                            component_labels: torch.Tensor | None) -> tuple[ModelOutput, torch.Tensor]:
        out = self.model(inputs, targets)
        parts = {} if components is None else {"components": components, "component_labels": component_labels}
        return out, self.model.loss(out, targets, inputs, **parts)

    def forward_loss(self, batch: Batch) -> tuple[ModelOutput, torch.Tensor]:
        """The model output and the loss of `batch`, compiled and autocast as configured (no backward)."""
        with autocast(self.device, self.precision):
            try:
                return self._forward_loss(batch.inputs, batch.targets, batch.components, batch.component_labels)
            except torch._dynamo.exc.BackendCompilerFailed as exc:
                reason = str(exc).strip().splitlines()[0]
                raise CapsbenchError(
                    f"train.compile=true, but torch.compile could not compile the training step on {self.device} "
                    f"({reason}); on CPU inductor needs a working C++ compiler (g++ or clang, or set CXX): install "
                    "one, or set train.compile=false"
                ) from exc

    def __call__(self, batch: Batch) -> tuple[ModelOutput, torch.Tensor]:
        out, loss = self.forward_loss(batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return out, loss
