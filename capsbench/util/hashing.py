"""Hashes that key caches. content_key: of a JSON-able identity. Code hashes: of the source that determines a model's
trained weights (its module and the model modules it imports, the training loop and step, the protocol, the data
pipeline), and of the whole package for unit keys.

A code hash follows what the code says, not where it lives: comments, docstrings and formatting do not count, the
module paths in imports between hashed modules are blanked, and files are combined by content alone, so moving or
renaming a module keeps every key. The import closure is read with ast; code that cannot change weights (CLI, config,
reporting, tracking, attacks, suites, the checkpoint cache) is neither hashed nor followed. A model from outside the
package is followed through its own top-level package the same way.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import json
from pathlib import Path

PACKAGE = "capsbench"
PACKAGE_DIR = Path(__file__).resolve().parents[1]
TRAINING_CODE = "capsbench.train.trained"  # builds the model and calls the loop, which calls the step
# capsbench modules whose code can change trained weights; anything else is neither hashed nor followed.
WEIGHT_AREAS = ("capsbench.layers.", "capsbench.models.", "capsbench.data.", "capsbench.train.")
# Inside those areas but without effect on weights: descriptions and shapes (in the key as model_args), the cache,
# the data files' names, checks and downloads.
NOT_WEIGHTS = ("capsbench.layers", "capsbench.models", "capsbench.data", "capsbench.data.catalog",
               "capsbench.data.files", "capsbench.train", "capsbench.train.checkpoints")


def content_key(identity: dict[str, object]) -> str:
    """A stable 20-hex-digit hash of a JSON-able identity (everything that determines a cached object)."""
    blob = json.dumps(identity, sort_keys=True, default=list).encode()
    return hashlib.sha256(blob).hexdigest()[:20]


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes (e.g. a weights file: its identity in unit and checkpoint keys)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _file(module: str, package_dir: Path) -> Path | None:
    """The source file of `module` (a package's __init__.py): under `package_dir` for capsbench's own modules, found
    by the import system for any other (importing its parent packages), or None."""
    if module == PACKAGE or module.startswith(PACKAGE + "."):
        base = package_dir.joinpath(*module.split(".")[1:])
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    origin = spec.origin if spec is not None else None
    return Path(origin) if origin and origin.endswith(".py") else None


def _absolute(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    """The absolute module an `from ... import` names, relative imports resolved against `module`."""
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    anchor = parts[: len(parts) - node.level + (1 if is_package else 0)]
    return ".".join([*anchor, *([node.module] if node.module else [])])


def _normalised(tree: ast.Module, module: str, is_package: bool, tops: frozenset[str]) -> str:
    """The tree as hashed: docstrings dropped, and in imports of hashed packages (`tops`) the module path blanked (the
    imported names stay), so that where a module lives does not count, only what it says."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
        elif isinstance(node, ast.ImportFrom) and _absolute(module, node, is_package).split(".")[0] in tops:
            node.module, node.level = None, 0
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in tops:
                    alias.name = alias.asname or ""
    return ast.dump(tree, include_attributes=False)


@functools.cache
def _parse(path: Path, mtime_ns: int, size: int, module: str, tops: frozenset[str]) -> tuple[str, ast.Module]:
    """(sha256 of the normalised code, parsed tree); cached per file version."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text, filename=str(path))
    code = _normalised(ast.parse(text), module, path.name == "__init__.py", tops)  # a second tree: normalising mutates
    return hashlib.sha256(code.encode()).hexdigest(), tree


def _parsed(path: Path, module: str, tops: frozenset[str] = frozenset({PACKAGE})) -> tuple[str, ast.Module]:
    stat = path.stat()
    return _parse(path, stat.st_mtime_ns, stat.st_size, module, tops)


def _reexport(package: str, name: str, package_dir: Path) -> str | None:
    """Where package `package` gets `name` from: an eager `from m import name`, or a lazy "m:name" target string."""
    path = _file(package, package_dir)
    if path is None:
        return None
    for node in ast.walk(_parsed(path, package)[1]):
        if isinstance(node, ast.ImportFrom) and node.module and any((a.asname or a.name) == name for a in node.names):
            return node.module
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.endswith(f":{name}"):
            return node.value.partition(":")[0]
    return None


def imports(module: str, package_dir: Path, tops: frozenset[str] = frozenset({PACKAGE})) -> set[str]:
    """The modules of the packages `tops` that `module` imports anywhere in its source (function-level imports too)."""
    path = _file(module, package_dir)
    if path is None:
        return set()
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(_parsed(path, module, tops)[1]):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(module, node, is_package)
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if _file(target, package_dir) is not None:
                    found.add(target)  # a submodule
                elif (init := _file(base, package_dir)) is not None and init.name == "__init__.py":
                    found.add(_reexport(base, alias.name, package_dir) or base)
                else:
                    found.add(base)
    return {m for m in found if m.split(".")[0] in tops}


def _weight_relevant(module: str, tops: frozenset[str]) -> bool:
    """capsbench's weight areas (less the exceptions), or any module of an external model's own package."""
    top = module.split(".")[0]
    if top != PACKAGE:
        return top in tops
    return module not in NOT_WEIGHTS and any(module.startswith(area) for area in WEIGHT_AREAS)


def weight_sources(roots: list[str], package_dir: Path | None = None) -> dict[str, str]:
    """{module name: code hash} for every weight-relevant module reachable from `roots`."""
    package_dir = package_dir or PACKAGE_DIR
    tops = frozenset({PACKAGE, *(r.split(".")[0] for r in roots)})
    seen: set[str] = set()
    todo = [r for r in roots if _weight_relevant(r, tops)]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo += [m for m in imports(module, package_dir, tops) if m not in seen and _weight_relevant(m, tops)]
    files = {}
    for module in seen:
        path = _file(module, package_dir)
        if path is not None:
            files[module] = _parsed(path, module, tops)[0]
    return dict(sorted(files.items()))


def source_identity(roots: list[str], package_dir: Path | None = None) -> tuple[str, dict[str, str]]:
    """(one sha256 over the sorted file hashes, by content alone; the per-file hashes, 16 hex digits, by module for
    diagnosis). Only the first belongs in a key: the second names where each file lives."""
    files = weight_sources(roots, package_dir)
    combined = hashlib.sha256("".join(f"{digest}\n" for digest in sorted(files.values())).encode()).hexdigest()
    return combined, {module: digest[:16] for module, digest in files.items()}


def training_roots(model_target: str, protocol: object, loader: object) -> list[str]:
    """Where the weight-relevant code of one training starts: the model's module, the training code, the protocol's
    module, and the dataset loader's module (when the loader is a registered "module:function" target)."""
    roots = [model_target.partition(":")[0], TRAINING_CODE, type(protocol).__module__]
    target = getattr(loader, "target", None)
    return roots + ([target.partition(":")[0]] if isinstance(target, str) else [])


@functools.cache
def package_hash(package_dir: Path | None = None) -> str:
    """One sha256 over every module of the package (code only, as above, by content alone): any change to measuring
    code changes it. Computed once per process: the code a process runs is the code it imported, so edits made to the
    files while a run is under way must not change the keys of its units between planning and writing the tables."""
    package_dir = package_dir or PACKAGE_DIR
    digests = []
    for path in sorted(package_dir.rglob("*.py")):
        parts = path.relative_to(package_dir).with_suffix("").parts
        module = ".".join([PACKAGE, *(parts[:-1] if parts[-1] == "__init__" else parts)])
        digests.append(_parsed(path, module)[0])
    return hashlib.sha256("".join(f"{d}\n" for d in sorted(digests)).encode()).hexdigest()
