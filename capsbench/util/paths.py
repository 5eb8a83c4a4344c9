"""A path setting made absolute (user and symbolic links resolved) and looked up once, so that a path the system
cannot follow (a symbolic-link loop, a name too long, a folder on the way this user may not search) is one error
naming the setting rather than Python's RuntimeError or OSError. Torch-free."""

from __future__ import annotations

from pathlib import Path

from capsbench.errors import CapsbenchError, clipped


def resolved(value: str | Path, key: str) -> Path:
    """`value` (the setting `key`) as an absolute path, its symbolic links followed."""
    try:
        path = Path(value).expanduser().resolve()
    except (RuntimeError, OSError) as exc:  # RuntimeError: Python < 3.13's "Symlink loop"; OSError ELOOP after
        raise CapsbenchError(f"{key} {value} cannot be followed: a symbolic link on the way points back at itself "
                             f"({exc}); remove or fix the link, or choose another path") from None
    try:
        path.exists()  # raises for what the system cannot look up (Path.exists answers False only for absent paths)
    except OSError as exc:
        raise CapsbenchError(f"{key} {clipped(value)} cannot be used: {exc.strerror or exc}; choose another "
                             "path") from None
    return path
