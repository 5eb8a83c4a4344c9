"""Where a user's model code failed, in one line: the exception and the file and line in the user's own code that
raised it (or led to it), or where the method that returned something unusable is defined; and the boundary around
calls into that code, where a SystemExit or a KeyboardInterrupt it raises becomes its error instead of ending the run
silently or passing for Ctrl-C."""

from __future__ import annotations

import importlib.util
import inspect
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from capsbench.util.signals import by_signal

MAX_MESSAGE = 200  # characters of the exception's first line
CAPSBENCH_DIR = Path(__file__).resolve().parents[1]


class CodeExit(RuntimeError):
    """A SystemExit, or a KeyboardInterrupt that no signal raised, from a model's code: that code's error. It carries
    the traceback that led to it."""


@contextmanager
def user_code() -> Iterator[None]:
    """Around a call into a user's model code (import, constructor, forward pass, hooks): SystemExit, and a
    KeyboardInterrupt that no signal raised, become CodeExit (an Exception, so the caller reports it as an error)."""
    try:
        yield
    except SystemExit as exc:
        raise CodeExit(f"SystemExit({exc.code!r}): a model's code must raise an exception, not exit the process"
                       ).with_traceback(exc.__traceback__) from None
    except KeyboardInterrupt as exc:
        if by_signal(exc):
            raise
        raise CodeExit("KeyboardInterrupt, with no signal: a model's code must raise an exception, not interrupt "
                       "the process").with_traceback(exc.__traceback__) from None


def describe(exc: BaseException) -> str:
    """The exception's type and the first line of its message."""
    message = (str(exc).strip().splitlines() or [""])[0][:MAX_MESSAGE]
    if isinstance(exc, CodeExit):
        return message
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def where_failed(exc: BaseException, module: str | None = None) -> str:
    """'ModuleNotFoundError: No module named 'foo' (at /src/mypkg/caps.py line 3)': the exception's first line and the
    innermost frame of the traceback inside `module`'s top-level package, else the innermost outside capsbench (else
    the innermost that is a file)."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{type(exc).__name__} at {exc.filename} line {exc.lineno}: {exc.msg}"
    frames = _frames(exc)
    outside = [f for f in frames if not _inside(Path(f.filename), [CAPSBENCH_DIR])]
    frame = (_own(frames, module) or outside or frames or [None])[-1]
    return describe(exc) if frame is None else f"{describe(exc)} (at {frame.filename} line {frame.lineno})"


def defined_at(function: object) -> str:
    """' (at FILE line N)' where `function` (a model's forward method) is defined; '' when its source is unknown."""
    try:
        return f" (at {inspect.getsourcefile(function)} line {inspect.getsourcelines(function)[1]})"
    except (OSError, TypeError):
        return ""


def user_frame(exc: BaseException, module: str) -> str | None:
    """' (at FILE line N)' for the innermost frame of the traceback inside `module`'s top-level package; None when the
    traceback never reaches that package (the exception did not come from its code)."""
    own = _own(_frames(exc), module)
    return f" (at {own[-1].filename} line {own[-1].lineno})" if own else None


def _frames(exc: BaseException) -> list[traceback.FrameSummary]:
    return [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<")]


def _own(frames: list[traceback.FrameSummary], module: str | None) -> list[traceback.FrameSummary]:
    places = _package_places(module)
    return [f for f in frames if _inside(Path(f.filename), places)]


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
