"""compose() and compose_suites() from command-line text, parsed once as the CLI's door does: the tests' shorthand."""

from __future__ import annotations

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
