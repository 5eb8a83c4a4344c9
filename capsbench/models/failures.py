"""Where a user's model code failed, in one line: the exception and the file and line in the user's own package that
raised it (or led to it), so that an import or constructor error of an external model names what to fix."""

from __future__ import annotations

import importlib.util
import traceback
from pathlib import Path

MAX_MESSAGE = 200  # characters of the exception's first line


def where_failed(exc: BaseException, module: str | None = None) -> str:
    """'ModuleNotFoundError: No module named 'foo' (at /src/mypkg/caps.py line 3)': the exception's first line and the
    deepest frame of the traceback inside `module`'s top-level package (else the deepest frame that is a file)."""
    message = (str(exc).strip().splitlines() or [""])[0][:MAX_MESSAGE]
    head = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{type(exc).__name__} at {exc.filename} line {exc.lineno}: {exc.msg}"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<")]
    own = [f for f in frames if _inside(Path(f.filename), _package_places(module))]
    frame = (own or frames or [None])[-1]
    return head if frame is None else f"{head} (at {frame.filename} line {frame.lineno})"


def _package_places(module: str | None) -> list[Path]:
    """The directories (or the file) of `module`'s top-level package, found without importing it."""
    if not module:
        return []
    try:
        spec = importlib.util.find_spec(module.split(".")[0])
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return [Path(p).resolve() for p in spec.submodule_search_locations]
    return [Path(spec.origin).resolve()] if spec.origin else []


def _inside(path: Path, places: list[Path]) -> bool:
    resolved = path.resolve()
    return any(resolved == place or place in resolved.parents for place in places)
