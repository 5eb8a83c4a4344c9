"""capsbench: a benchmark harness for capsule networks against CNN baselines."""

import os
import sys

# Idle OpenMP workers sleep instead of spinning. On a 2-core machine shared with other jobs, spinning workers made
# a 2-thread CapsNet training step 3-7x slower than 1 thread; sleeping ones ran level with it (capsbench.train.step).
# libgomp reads this once, when torch loads: set OMP_WAIT_POLICY yourself to override, or before importing torch.
if "torch" not in sys.modules:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from capsbench.util.lazy import lazy_attributes  # noqa: E402
from capsbench.util.version import __version__  # noqa: E402

# imported on first use: the notebook API with torch, pandas and MLflow, so that the CLI starts without them; the
# model registry too, so that the console script's signal handlers come before anything but these lines
__getattr__ = lazy_attributes(__name__, {"evaluate": "capsbench.run.evaluate:evaluate",
                                         "Evaluation": "capsbench.run.evaluate:Evaluation",
                                         "create_model": "capsbench.models:create_model",
                                         "list_models": "capsbench.models:list_models"})

__all__ = ["Evaluation", "__version__", "create_model", "evaluate", "list_models"]
