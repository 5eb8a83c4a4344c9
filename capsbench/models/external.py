"""Models from outside the package, registered beside the built-ins under an alias: `register.<alias>=pkg.mod:Obj` (on
the command line or in a YAML config), the entry-point group `capsbench.models`, or a model instance given to
capsbench.evaluate. Obj is a torch.nn.Module class or a factory function annotated to return one. Torch-free until a
model is built: what Obj accepts is read from its source with ast; it is imported when built, by the run's pre-flight
check, before anything is written."""

from __future__ import annotations

import ast
import copy
import functools
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import logging
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from capsbench.errors import CapsbenchError
from capsbench.models import MODELS
from capsbench.models.failures import user_code, where_failed
from capsbench.util.hashing import source_identity
from capsbench.util.lazy import split_target

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "capsbench.models"
WEIGHT_SUFFIXES = (".pt", ".pth", ".safetensors")  # state dicts (read with weights_only=True) and safetensors
DIMENSIONS = {"in_channels": 1, "image_size": 28, "num_classes": 10}  # the dataset's; passed where Obj accepts them
BUILT_INS = frozenset(MODELS.names())  # this module is the only way in for external models: all present are built in
_ALIAS = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Signature:
    """What Obj accepts, read from the source of the class's own __init__ or the function's def."""

    defaults: dict[str, Any]  # parameters with a literal default (what a unit key records)
    names: tuple[str, ...]  # every parameter, with a default or not
    required: tuple[str, ...]  # parameters without a default
    var_keyword: bool  # takes **kwargs: passed num_classes and every model_args.<alias>.* given


@dataclass(frozen=True)
class ExternalSpec:
    """An external model: its "module:Obj" target, its alias, where it was registered, and (capsbench.evaluate) the
    model instance it copies instead of building one."""

    target: str
    alias: str
    origin: str  # "register", "entry point of <dist> <version>", "instance"
    instance: Any = field(default=None, compare=False, repr=False)
    state_sha256: str | None = None  # the instance's state dict by content (capsbench.models.weights.state_sha256)
    attributes_sha256: str | None = None  # the instance's plain attributes (capsbench.run.evaluate)
    defaults: dict[str, Any] = field(default_factory=dict)  # ModelSpec's: external models take theirs from the source

    def __post_init__(self) -> None:
        split_target(self.target)

    @property
    def description(self) -> str:
        """The first line of Obj's docstring (read without importing it), or why it cannot be read."""
        return _description(self.target) if self.instance is None else f"instance of {self.target}"

    def signature(self) -> Signature:
        if self.instance is not None:
            return Signature({}, (), (), False)
        return read_signature(self.target, f"model {self.alias!r}")

    def arguments(self) -> dict[str, Any]:
        """The dataset's dimensions and every parameter of Obj with a literal default."""
        return {**DIMENSIONS, **self.signature().defaults}

    def argument_ranges(self) -> dict[str, Any]:
        """None declared: an external model checks its own arguments when it is built."""
        return {}

    def accepted(self) -> list[str] | None:
        sig = self.signature()
        return None if sig.var_keyword else [*DIMENSIONS, *sig.names]

    @property
    def cls(self) -> Any:
        """Obj, imported now; a module that fails to import is named with the file and line."""
        if self.instance is not None:
            return type(self.instance)
        module, name = split_target(self.target)
        try:
            with user_code():
                loaded = importlib.import_module(module)
        except Exception as exc:  # the user's module ran and raised, with any exception: report where, in one line
            raise CapsbenchError(
                f"model {self.alias!r}: {module} failed to import: {where_failed(exc, module)}"
            ) from None
        obj = getattr(loaded, name, None)
        why = _not_a_model(obj, name)
        if why is not None:
            raise CapsbenchError(f"model {self.alias!r}: {self.target} {why}; capsbench calls nothing else, so that a "
                                 "config naming any callable cannot run it")
        return obj

    def build(self, **kwargs: Any) -> Any:
        """The model: Obj called with the arguments it accepts (the instance copied), adapted to capsbench's output
        contract (capsbench.models.adapter)."""
        from capsbench.models.adapter import adapt  # lazy: torch, only once a model is built

        shape = (kwargs.get("in_channels", 1), kwargs.get("image_size", 28), kwargs.get("image_size", 28))
        classes = kwargs.get("num_classes", DIMENSIONS["num_classes"])
        if self.instance is not None:
            return adapt(copy.deepcopy(self.instance), name=self.alias, input_shape=shape, num_classes=classes)
        sig, obj = self.signature(), self.cls
        # the dataset's channels and size only where named (a **kwargs factory gets num_classes and the user's own)
        passed = {k: v for k, v in kwargs.items() if k in sig.names or sig.var_keyword
                  and (k not in DIMENSIONS or k == "num_classes")}
        try:
            with user_code():
                model = obj(**passed)
        except Exception as exc:  # the user's constructor raised (or exited): report where, in one line
            raise CapsbenchError(
                f"model {self.alias!r}: {self.target}(...) raised {where_failed(exc, self.target.partition(':')[0])}"
            ) from None
        return adapt(model, name=self.alias, input_shape=shape, num_classes=classes)

    def source_hash(self) -> str | None:
        """The hash of Obj's module and the modules of its own package it imports (capsbench.util.hashing), or of
        the instance's class source; None when no source can be read (a class defined in a notebook cell)."""
        module = self.target.partition(":")[0]
        code = None
        if self.instance is None or module != "__main__":
            files = source_identity([module])
            code = files[0] if files[1] else None
        if code is None and self.instance is not None:
            try:
                code = hashlib.sha256(inspect.getsource(type(self.instance)).encode()).hexdigest()
            except (OSError, TypeError):
                return None
        if self.instance is None or code is None:
            return code
        return hashlib.sha256(f"{code}\n{self.attributes_sha256}".encode()).hexdigest()


def _not_a_model(obj: Any, name: str) -> str | None:
    """Why `obj` does not say, before it is called, that it builds a model (None when it does): a model is a subclass
    of torch.nn.Module, or a function whose return annotation is one."""
    from torch import nn  # lazy: torch, only once a model is built

    if inspect.isclass(obj):
        return None if issubclass(obj, nn.Module) else "is a class but no subclass of torch.nn.Module"
    if not inspect.isfunction(obj):
        return "is neither a class nor a Python function"
    try:
        returns = typing.get_type_hints(obj).get("return")
    except (NameError, TypeError, SyntaxError, AttributeError):  # an annotation that names nothing importable
        returns = None
    if inspect.isclass(returns) and issubclass(returns, nn.Module):
        return None
    return f"is a function not annotated to return a torch.nn.Module: annotate it, def {name}(...) -> nn.Module"


def register_alias(alias: str, target: str, where: str) -> ExternalSpec:
    """Register `target` under `alias` (the latest registration of an alias wins); its module must be found and must
    define Obj at its top level. `where` names the setting in errors (e.g. "register.mycaps=pkg.caps:MyCaps")."""
    if not _ALIAS.match(alias):
        raise CapsbenchError(f"{where}: an alias is letters, digits and _, starting with a letter, e.g. mycaps")
    if alias in BUILT_INS:
        raise CapsbenchError(
            f"{where}: {alias!r} is a built-in model; register yours under another name, e.g. register.{alias}_own=..."
        )
    try:
        split_target(target)
    except ValueError:
        raise CapsbenchError(
            f"{where}: expected package.module:ClassOrFunction, e.g. register.mycaps=mypkg.caps:MyCaps"
        ) from None
    read_signature(target, where)  # the module is found, parses, and defines Obj
    spec = ExternalSpec(target, alias, "register")
    MODELS.replace(alias, spec)
    return spec


def register_instance(alias: str, instance: Any, state_sha256: str, attributes_sha256: str) -> ExternalSpec:
    """Register a model instance under `alias`: units build a copy of it (its class and state, weights included);
    its state dict's and plain attributes' hashes (with its class's source) are what its units are keyed by."""
    cls = type(instance)
    spec = ExternalSpec(f"{cls.__module__}:{cls.__name__}", alias, "instance", instance=instance,
                       state_sha256=state_sha256, attributes_sha256=attributes_sha256)
    if alias in BUILT_INS:
        raise CapsbenchError(f"name={alias!r} is a built-in model; name your instance otherwise, e.g. {alias}_own")
    MODELS.replace(alias, spec)
    return spec


@functools.cache
def discover() -> tuple[str, ...]:
    """Register the models that installed packages declare under the entry-point group `capsbench.models`; their
    names. An entry point named like a built-in is ignored with a warning (it would change what that name means)."""
    found = []
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist is not None else "an installed package"
        if ep.name in BUILT_INS or not _ALIAS.match(ep.name):
            log.warning("ignoring entry point %r of %s: a built-in model's name, or not a plain name", ep.name, dist)
            continue
        try:
            spec = ExternalSpec(ep.value, ep.name, f"entry point of {dist}")
        except ValueError:
            log.warning("ignoring entry point %s = %r of %s: expected package.module:Obj", ep.name, ep.value, dist)
            continue
        if not (ep.name in MODELS and MODELS.get(ep.name).origin == "register"):  # an alias given explicitly wins
            MODELS.replace(ep.name, spec)
        found.append(ep.name)
    return tuple(found)


def external_spec(name: str) -> ExternalSpec | None:
    """The external spec registered under `name`, or None for a built-in model."""
    spec = MODELS.get(name)
    return spec if isinstance(spec, ExternalSpec) else None


def _module_source(module: str, where: str) -> tuple[Path, ast.Module]:
    """The file and parsed source of `module`, found without running it (its parent packages are imported)."""
    try:
        with user_code():
            found = importlib.util.find_spec(module)
    except ModuleNotFoundError:
        found = None
    except Exception as exc:  # a parent package's own code ran and raised: report where, in one line
        raise CapsbenchError(f"{where}: a parent package of {module} failed to import: {where_failed(exc)}") from None
    if found is None:
        raise CapsbenchError(
            f"{where}: no module named {module!r} on the Python path; install its package, or run with "
            "PYTHONPATH=<the directory that holds it>"
        )
    if found.origin is None or not found.origin.endswith(".py"):
        raise CapsbenchError(f"{where}: {module} has no Python source; capsbench reads and hashes a model's source")
    path = Path(found.origin)
    try:
        return path, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as exc:
        raise CapsbenchError(
            f"{where}: {module} failed to import: SyntaxError at {path} line {exc.lineno}: {exc.msg}"
        ) from None


def read_signature(target: str, where: str) -> Signature:
    """What `target`'s Obj accepts; an error naming the setting when its module or Obj cannot be found."""
    module, name = split_target(target)
    path, tree = _module_source(module, where)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            init = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
            return _inherited(module, node, where) if init is None else _parameters(init.args, skip=1)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return _parameters(node.args, skip=0)
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    base = importlib.util.resolve_name("." * node.level + (node.module or ""), _package(module, path))
                    if base.split(".")[0] != module.split(".")[0]:
                        raise CapsbenchError(f"{where}: {name} comes from {base}, another package; register it there")
                    return read_signature(f"{base}:{alias.name}", where)
    for node in tree.body:  # `from .resnet import *`, as torchvision.models does
        if isinstance(node, ast.ImportFrom) and [a.name for a in node.names] == ["*"]:
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), _package(module, path))
            if base.split(".")[0] == module.split(".")[0]:
                try:
                    return read_signature(f"{base}:{name}", where)
                except CapsbenchError:
                    continue
    defined = sorted(n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef)))
    raise CapsbenchError(
        f"{where}: {module} ({path}) defines no class or function {name!r} at its top level "
        f"(it defines: {', '.join(defined) or 'none'})"
    )


def _inherited(module: str, node: ast.ClassDef, where: str) -> Signature:
    """The signature of the first base class, of the same top-level package, that has one (a class without an
    __init__ of its own takes its base's); none for a class built on outside bases alone (nn.Module)."""
    for base in node.bases:
        if isinstance(base, ast.Name):
            try:
                found = read_signature(f"{module}:{base.id}", where)
            except CapsbenchError:  # a base imported from another package (torch.nn.Module): not followed
                continue
            if found.names or found.var_keyword:
                return found
    return Signature({}, (), (), False)


def _package(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _parameters(args: ast.arguments, skip: int) -> Signature:
    """The parameters of a def (the first `skip` dropped: self), their literal defaults and which have none."""
    positional = [*args.posonlyargs, *args.args]
    pos_defaults = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    pairs = [*list(zip(positional, pos_defaults))[skip:], *zip(args.kwonlyargs, args.kw_defaults)]
    defaults, required = {}, []
    for arg, default in pairs:
        if default is None:
            required.append(arg.arg)
            continue
        try:
            value = ast.literal_eval(default)
        except ValueError:
            continue  # not a literal (e.g. nn.ReLU): the model keeps its own default
        defaults[arg.arg] = list(value) if isinstance(value, tuple) else value
    return Signature(defaults, tuple(a.arg for a, _ in pairs), tuple(required), args.kwarg is not None)


@functools.cache
def _description(target: str) -> str:
    module, name = split_target(target)
    try:
        _, tree = _module_source(module, target)
    except CapsbenchError as exc:
        return f"(cannot read its source: {exc})"
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)) and node.name == name:
            doc = ast.get_docstring(node)
            return doc.strip().splitlines()[0] if doc else f"{name} from {module}"
    return f"{name} from {module}"
