"""Registry targets named "package.module:Name", imported only when used; what a class declares (its keyword-only
constructor arguments, literal class attributes) is read from its source with ast, so listing and validating
never import torch."""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
from pathlib import Path
from typing import Any


def split_target(target: str) -> tuple[str, str]:
    """'capsbench.models.capsnet:CapsNet' -> ('capsbench.models.capsnet', 'CapsNet')."""
    module, sep, name = target.partition(":")
    if not sep or not module or not name.isidentifier():
        raise ValueError(f"a registry target is 'package.module:Name', got {target!r}")
    return module, name


def load(target: str) -> Any:
    """Import the target's module and return the named object."""
    module, name = split_target(target)
    return getattr(importlib.import_module(module), name)


def lazy_attributes(module: str, table: dict[str, str]) -> Any:
    """A module-level __getattr__ that imports each name of `table` ("package.module:Name") on first use."""

    def __getattr__(name: str) -> Any:
        if name in table:
            return load(table[name])
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


class LazyFunction:
    """A callable that imports its target on the first call (e.g. a dataset loader that needs torchvision)."""

    def __init__(self, target: str) -> None:
        split_target(target)
        self.target = target

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return load(self.target)(*args, **kwargs)

    def __repr__(self) -> str:
        return f"LazyFunction({self.target!r})"


@functools.cache
def module_source(module: str) -> tuple[Path, ast.Module]:
    """The file and parsed source of an importable module, without executing it (its parent packages are imported)."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        raise ValueError(f"no Python source for module {module!r}")
    path = Path(spec.origin)
    return path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _class(target: str) -> tuple[str, ast.ClassDef]:
    module, name = split_target(target)
    for node in module_source(module)[1].body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return module, node
    raise ValueError(f"{target}: no class {name} at the top level of {module}")


def _constant(module: str, name: str, seen: frozenset[tuple[str, str]] = frozenset()) -> Any:
    """A module-level literal `name = ...`, or one imported with `from package.module import name`."""
    if (module, name) in seen:
        raise ValueError(f"{module}.{name}: circular constant")
    seen = seen | {(module, name)}
    for node in module_source(module)[1].body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return _literal(module, node.value, seen)
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == name
            and node.value
        ):
            return _literal(module, node.value, seen)
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return _constant(node.module, alias.name, seen)
    raise ValueError(f"{module}: no literal module-level constant {name}")


def _literal(module: str, node: ast.expr, seen: frozenset[tuple[str, str]] = frozenset()) -> Any:
    """A literal expression, where a bare name may stand for a literal module-level constant."""
    if isinstance(node, ast.Name):
        return _constant(module, node.id, seen)
    if isinstance(node, (ast.Tuple, ast.List)):
        values = [_literal(module, e, seen) for e in node.elts]
        return tuple(values) if isinstance(node, ast.Tuple) else values
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise ValueError(f"{module}: {ast.unparse(node)!r} is not a literal") from None


def keyword_arguments(target: str) -> dict[str, Any]:
    """Keyword-only arguments of the class's own __init__ with their default values (literals only)."""
    module, cls = _class(target)
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and node.name == "__init__":
            args = node.args
            out = {}
            for arg, default in zip(args.kwonlyargs, args.kw_defaults):
                if default is None:
                    raise ValueError(f"{target}: keyword argument {arg.arg!r} needs a default to be registered")
                out[arg.arg] = _literal(module, default)
            return out
    raise ValueError(f"{target}: the class defines no __init__ of its own; registered classes declare their arguments")


_REQUIRED = object()


def class_literal(target: str, attribute: str, default: Any = _REQUIRED) -> Any:
    """The literal value of `attribute = ...` in the class body; `default` when the class has none (else an error)."""
    module, cls = _class(target)
    for node in cls.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == attribute for t in node.targets):
            return _literal(module, node.value)
    if default is not _REQUIRED:
        return default
    raise ValueError(f"{target}: no class attribute {attribute!r} assigned a literal")
