"""compose() and compose_suites() from command-line text, parsed once as the CLI's door does: the tests' shorthand."""

from __future__ import annotations

import re
from typing import Any

from omegaconf import DictConfig

from capsbench.config import compose as composing
from capsbench.config.request import parse_command_line


def compose(items: list[str], **kwargs: Any) -> DictConfig:
    """capsbench.config.compose.compose of `key=value` items."""
    return composing.compose(parse_command_line(items), **kwargs)


def compose_suites(items: list[str], **kwargs: Any) -> list[DictConfig]:
    """capsbench.config.compose.compose_suites of `key=value` items."""
    return composing.compose_suites(parse_command_line(items), **kwargs)


def suite_budget(run_name: str) -> str:
    """A parent run's name without its models and stamp (accuracy-smoke-cnn_9x9-20261121-143005 -> accuracy-smoke);
    a unit run's name as it is."""
    return re.sub(r"-[^-]+-\d{8}-\d{6}(-\d+)?$", "", run_name)
