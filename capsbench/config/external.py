"""Settings of external models, checked without torch before anything is written: aliases
(register.<alias>=pkg.mod:Obj, and the entry points of installed packages), the arguments an external model requires,
and weights files (weights.<model>=PATH)."""

from __future__ import annotations

from omegaconf import DictConfig

from capsbench.config.request import Request
from capsbench.errors import CapsbenchError
from capsbench.models import MODELS
from capsbench.models.external import DIMENSIONS, WEIGHT_SUFFIXES, discover, external_spec, register_alias
from capsbench.util.paths import resolved


def register_external(cfg: DictConfig) -> None:
    """Register the entry points of installed packages, then every register.<alias>=pkg.mod:Obj of the config."""
    discover()
    for alias, target in cfg.register.items():
        register_alias(str(alias), str(target), f"register.{alias}={target}")


def register_listed(request: Request) -> None:
    """`capsbench list models [register.<alias>=pkg.mod:Obj ...] [config=FILE]`: the aliases to list beside the
    built-ins and the entry points."""
    discover()
    unknown = sorted(set(request.line) - {"register"})
    if unknown:
        raise CapsbenchError(f"`capsbench list models` takes register.<alias>= and config= only, got {unknown[0]}=")
    aliases = {**(request.file.get("register") or {}), **(request.line.get("register") or {})}
    for alias, target in aliases.items():
        register_alias(str(alias), str(target), f"register.{alias}={target}")


def check_external(cfg: DictConfig) -> None:
    """Weights files exist and have a known format (their paths made absolute); external models get every argument
    they require."""
    for name, value in cfg.weights.items():
        MODELS.get(str(name))  # an unknown model: the error lists the names
        path = resolved(str(value), f"weights.{name}")
        if path.suffix not in WEIGHT_SUFFIXES:
            raise CapsbenchError(
                f"weights.{name}={value}: expected a state dict (.pt or .pth) or a .safetensors file"
            )
        if not path.is_file():
            raise CapsbenchError(f"weights.{name}={value}: no such file ({path})")
        cfg.weights[name] = str(path)
    for name in cfg.models:
        spec = external_spec(name)
        if spec is None:
            continue
        given = cfg.model_args.get(name) or {}
        missing = [r for r in spec.signature().required if r not in DIMENSIONS and r not in given]
        if missing:
            raise CapsbenchError(
                f"model {name!r} ({spec.target}) needs {', '.join(missing)}: give model_args.{name}.{missing[0]}=..."
            )
