"""Settings of outside models, checked without torch before anything is written: a YAML file of settings
(config=FILE), aliases (register.<alias>=pkg.mod:Obj, and the entry points of installed packages), the arguments an
outside model requires, and weights files (weights.<model>=PATH)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from yaml import YAMLError

from capsbench.errors import CapsbenchError
from capsbench.models import MODELS
from capsbench.models.outside import DIMENSIONS, WEIGHT_SUFFIXES, discover, outside, register_alias

EXAMPLE = "config=my_run.yaml holding `register: {mycaps: mypkg.caps:MyCaps}`"


def read_user_config(value: str | None) -> tuple[dict[str, Any], str]:
    """The settings of config=FILE (layered over the suite's YAML, under the command line) and its name in errors."""
    if value is None:
        return {}, ""
    path = Path(value).expanduser()
    if not path.is_file():
        raise CapsbenchError(f"config={value}: no such file; give a YAML file of settings, e.g. {EXAMPLE}")
    try:
        loaded = OmegaConf.to_container(OmegaConf.load(path))
    except YAMLError as exc:
        raise CapsbenchError(f"config={value} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(loaded, dict):
        raise CapsbenchError(f"config={value} must hold a mapping of settings, e.g. {EXAMPLE}")
    return loaded, f"config file {path}"


def register_outside(cfg: DictConfig) -> None:
    """Register the entry points of installed packages, then every register.<alias>=pkg.mod:Obj of the config."""
    discover()
    for alias, target in cfg.register.items():
        register_alias(str(alias), str(target), f"register.{alias}={target}")


def register_listed(overrides: list[str]) -> None:
    """`capsbench list models [register.<alias>=pkg.mod:Obj ...] [config=FILE]`: the aliases to list beside the
    built-ins and the entry points."""
    discover()
    raw = {k: v for k, _, v in (o.partition("=") for o in overrides)}
    aliases = dict(read_user_config(raw.pop("config", None))[0].get("register") or {})
    aliases.update({k.removeprefix("register."): v for k, v in raw.items()})
    for alias, target in aliases.items():
        register_alias(str(alias), str(target), f"register.{alias}={target}")


def check_outside(cfg: DictConfig) -> None:
    """Weights files exist and have a known format (their paths made absolute); outside models get every argument
    they require."""
    for name, value in cfg.weights.items():
        MODELS.get(str(name))  # an unknown model: the error lists the names
        path = Path(str(value)).expanduser().resolve()
        if path.suffix not in WEIGHT_SUFFIXES:
            raise CapsbenchError(
                f"weights.{name}={value}: expected a state dict (.pt or .pth) or a .safetensors file"
            )
        if not path.is_file():
            raise CapsbenchError(f"weights.{name}={value}: no such file ({path})")
        cfg.weights[name] = str(path)
    for name in cfg.models:
        spec = outside(name)
        if spec is None:
            continue
        given = cfg.model_args.get(name) or {}
        missing = [r for r in spec.signature().required if r not in DIMENSIONS and r not in given]
        if missing:
            raise CapsbenchError(
                f"model {name!r} ({spec.target}) needs {', '.join(missing)}: give model_args.{name}.{missing[0]}=..."
            )
