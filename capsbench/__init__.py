"""capsbench: a benchmark harness for capsule networks against CNN baselines."""

from capsbench.models import create_model, list_models

__version__ = "0.1.0"

__all__ = ["__version__", "create_model", "list_models"]
