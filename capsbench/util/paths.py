"""A path setting made absolute (user and symbolic links resolved), with a symbolic-link loop as one error naming
the setting rather than Python's RuntimeError. Torch-free."""

from __future__ import annotations

from pathlib import Path

from capsbench.errors import CapsbenchError


def resolved(value: str | Path, key: str) -> Path:
    """`value` (the setting `key`) as an absolute path, its symbolic links followed."""
    try:
        return Path(value).expanduser().resolve()
    except (RuntimeError, OSError) as exc:  # RuntimeError: Python < 3.13's "Symlink loop"; OSError ELOOP after
        raise CapsbenchError(f"{key} {value} cannot be followed: a symbolic link on the way points back at itself "
                             f"({exc}); remove or fix the link, or choose another path") from None
