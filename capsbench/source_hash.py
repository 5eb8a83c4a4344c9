"""A hash of the source code that determines a model's trained weights, part of the checkpoint key: the model's module
and the model modules it imports, the training loop, the training protocol, and the data pipeline (loading, splitting,
batching, augmentation). The import closure is read with ast; code that cannot change weights (CLI, config, reporting,
tracking, attacks, suites, the checkpoint cache) is left out. Comments, docstrings and formatting do not count.
"""

from __future__ import annotations

import ast
import functools
import hashlib
from pathlib import Path

PACKAGE = "capsbench"
PACKAGE_DIR = Path(__file__).resolve().parent
TRAINING_LOOP = "capsbench.training"
# Modules whose code can change trained weights; anything else is neither hashed nor followed.
WEIGHT_AREAS = ("capsbench.models.", "capsbench.data.", "capsbench.protocols", "capsbench.training", "capsbench.train_step",
                "capsbench.evaluation", "capsbench.adversarial_training")
NOT_WEIGHTS = ("capsbench.data.catalog",)  # descriptions and shapes only; the shapes are in the key as model_args


def _file(module: str, package_dir: Path) -> Path | None:
    """The source file of capsbench module `module` under `package_dir` (a package's __init__.py), or None."""
    parts = module.split(".")[1:]
    base = package_dir.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return tree


@functools.cache
def _parse(path: Path, mtime_ns: int, size: int) -> tuple[str, ast.Module]:
    """(sha256 of the code without comments, docstrings and formatting, parsed tree); cached per file version."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text, filename=str(path))
    code = ast.dump(_strip_docstrings(ast.parse(text)), include_attributes=False)  # a second tree: stripping mutates
    return hashlib.sha256(code.encode()).hexdigest(), tree


def _parsed(path: Path) -> tuple[str, ast.Module]:
    stat = path.stat()
    return _parse(path, stat.st_mtime_ns, stat.st_size)


def _reexport(package: str, name: str, package_dir: Path) -> str | None:
    """Where package `package` gets `name` from: an eager `from m import name`, or a lazy "m:name" target string."""
    path = _file(package, package_dir)
    if path is None:
        return None
    for node in ast.walk(_parsed(path)[1]):
        if isinstance(node, ast.ImportFrom) and node.module and any((a.asname or a.name) == name for a in node.names):
            return node.module
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.endswith(f":{name}"):
            return node.value.partition(":")[0]
    return None


def imports(module: str, package_dir: Path) -> set[str]:
    """The capsbench modules `module` imports anywhere in its source (function-level imports too)."""
    path = _file(module, package_dir)
    if path is None:
        return set()
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(_parsed(path)[1]):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                target = f"{base}.{alias.name}"
                if _file(target, package_dir) is not None:
                    found.add(target)  # a submodule
                elif (init := _file(base, package_dir)) is not None and init.name == "__init__.py":
                    found.add(_reexport(base, alias.name, package_dir) or base)
                else:
                    found.add(base)
    return {m for m in found if m == PACKAGE or m.startswith(PACKAGE + ".")}


def _weight_relevant(module: str) -> bool:
    """Inside the weight areas, and neither a registry package (models, data) nor a listed exception."""
    if module in NOT_WEIGHTS or module in ("capsbench.models", "capsbench.data"):
        return False
    return any(module == area.rstrip(".") or module.startswith(area) for area in WEIGHT_AREAS)


def weight_sources(roots: list[str], package_dir: Path | None = None) -> dict[str, str]:
    """{path relative to the package's parent: code hash} for every weight-relevant module reachable from `roots`."""
    package_dir = package_dir or PACKAGE_DIR
    seen: set[str] = set()
    todo = [r for r in roots if r.startswith(PACKAGE + ".") and _weight_relevant(r)]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo += [m for m in imports(module, package_dir) if m not in seen and _weight_relevant(m)]
    files = {}
    for module in seen:
        path = _file(module, package_dir)
        if path is not None:
            files[path.relative_to(package_dir.parent).as_posix()] = _parsed(path)[0]
    return dict(sorted(files.items()))


def source_identity(roots: list[str], package_dir: Path | None = None) -> dict[str, object]:
    """{"hash": one sha256 over the sorted (path, file hash) pairs, "files": the per-file hashes (16 hex digits)}."""
    files = weight_sources(roots, package_dir)
    combined = hashlib.sha256("".join(f"{path}\0{digest}\n" for path, digest in files.items()).encode()).hexdigest()
    return {"hash": combined, "files": {path: digest[:16] for path, digest in files.items()}}


def training_roots(model_target: str, protocol: object, loader: object) -> list[str]:
    """Where the weight-relevant code of one training starts: the model's module, the training loop, the protocol's
    module, and the dataset loader's module (when the loader is a registered "module:function" target)."""
    roots = [model_target.partition(":")[0], TRAINING_LOOP, type(protocol).__module__]
    target = getattr(loader, "target", None)
    return roots + ([target.partition(":")[0]] if isinstance(target, str) else [])


@functools.cache
def package_hash(package_dir: Path | None = None) -> str:
    """One sha256 over every module of the package (code only, as above): any change to measuring code changes it.
    Computed once per process: the code a process runs is the code it imported, so edits made to the files while
    a run is under way must not change the keys of its units between planning and writing the tables."""
    package_dir = package_dir or PACKAGE_DIR
    files = sorted(package_dir.rglob("*.py"))
    parts = [f"{p.relative_to(package_dir).as_posix()}\0{_parsed(p)[0]}\n" for p in files]
    return hashlib.sha256("".join(parts).encode()).hexdigest()
