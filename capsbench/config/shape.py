"""Checks that each value of a config layer has the right form (a group of settings, a mapping, a list or a single
value) against the typed schema before it is merged, and says which form is expected, with an example."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from capsbench.errors import CapsbenchError, clipped

WORDS = {int: "an integer", float: "a number", str: "a name", bool: "true or false"}
PLURAL = {int: "integers", float: "numbers", str: "names", bool: "booleans"}
EXAMPLES = {int: "[0,1,2]", float: "[0,0.1]", str: "[a,b]", bool: "[true,false]"}


def _optional(tp: Any) -> Any:
    """X | None -> X (other types unchanged)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0] if len(args) == 1 else Any
    return tp


def _kind(tp: Any) -> str:
    tp = _optional(tp)
    if dataclasses.is_dataclass(tp):
        return "group"
    origin = typing.get_origin(tp) or tp
    if origin is dict:
        return "mapping"
    if origin in (list, tuple):
        return "list"
    return "any" if tp is Any else "value"


def _element(tp: Any) -> Any:
    args = typing.get_args(_optional(tp))
    return args[-1] if args else Any


def describe(tp: Any) -> str:
    """'an integer', 'a list of integers', 'a mapping of name -> a list of numbers', ..."""
    kind = _kind(tp)
    if kind == "list":
        return f"a list of {PLURAL.get(_element(tp), 'values')}"
    if kind == "mapping":
        return f"a mapping of name -> {describe(_element(tp))}"
    if kind == "group":
        return "a group of settings"
    return WORDS.get(_optional(tp), "a value")


def _example(tp: Any, given: Any = None) -> str:
    """A value of type `tp` as written on the command line; a scalar given for a list becomes [scalar] when it fits."""
    kind, elem = _kind(tp), _element(tp)
    if kind == "list":
        if given is not None and not isinstance(given, (dict, list)) and _fits(elem, given):
            return f"[{given}]"
        return EXAMPLES.get(elem, "[...]")
    if kind == "mapping":
        return "{...}"
    return {int: "1", float: "0.1", str: "NAME", bool: "true"}.get(_optional(tp), "VALUE")


def _fits(tp: Any, value: Any) -> bool:
    if tp in (int, float):
        return (
            isinstance(value, (int, float)) and not isinstance(value, bool) and (tp is float or isinstance(value, int))
        )
    return tp is Any or isinstance(value, tp)


def _form(value: Any) -> str:
    if isinstance(value, dict):
        return f"a mapping {clipped(value)}"
    if isinstance(value, list):
        return f"the list {clipped(value)}"
    return clipped(repr(value))


def _keys(current: Any) -> list[str]:
    return [str(k) for k in current] if isinstance(current, DictConfig) else []


def check_shapes(schema: DictConfig, layer: dict[str, Any], source: str) -> None:
    """Raise a CapsbenchError for the first value of `layer` whose form does not match `schema`'s typed fields."""
    _check_group(OmegaConf.get_type(schema), schema, layer, "", source)


def _check_group(cls: Any, current: Any, layer: dict[str, Any], prefix: str, source: str) -> None:
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key, value in layer.items():
        if key not in fields:
            continue  # unknown keys are reported by the key check, with close matches
        node = current.get(key) if isinstance(current, DictConfig) else None
        _check(hints[key], node, value, f"{prefix}{key}", fields[key].metadata.get("keys", "name"), source)


def _check(tp: Any, current: Any, value: Any, path: str, keys: str, source: str) -> None:
    kind = _kind(tp)
    if kind == "any" or value is None:
        return  # None is checked by OmegaConf against the field's optionality
    where = f" in {source}" if source != "the command line" else ""
    if kind == "group":
        cls = _optional(tp)
        if not isinstance(value, dict):
            names = [f.name for f in dataclasses.fields(cls)]
            shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
            raise CapsbenchError(
                f"{path}{where} is a group of settings ({shown}), got {_form(value)}; "
                f"set them one by one, e.g. {path}.{names[0]}=..."
            )
        _check_group(cls, current, value, f"{path}.", source)
    elif kind == "mapping":
        elem = _element(tp)
        if not isinstance(value, dict):
            key = (_keys(current) or [keys.upper()])[0]
            raise CapsbenchError(
                f"{path}{where} maps {keys} -> {describe(elem)}, got {_form(value)}; "
                f"set one entry per {keys}, e.g. {path}.{key}={_example(elem)}"
            )
        for k, v in value.items():
            _check(elem, current.get(k) if isinstance(current, DictConfig) else None, v, f"{path}.{k}", "name", source)
    elif kind == "list" and not isinstance(value, list):
        raise CapsbenchError(
            f"{path}{where} takes {describe(tp)}, got {_form(value)}; e.g. {path}={_example(tp, value)}"
        )
    elif kind == "value" and isinstance(value, (dict, list)):
        raise CapsbenchError(f"{path}{where} takes {describe(tp)}, got {_form(value)}; e.g. {path}={_example(tp)}")


def expected_at(schema: DictConfig, dotted: str) -> str | None:
    """What the schema expects at `dotted` (list indices such as seeds[0] name their list), or None if unknown."""
    tp: Any = OmegaConf.get_type(schema)
    for part in dotted.split("[")[0].split("."):
        if dataclasses.is_dataclass(tp):
            hints = typing.get_type_hints(tp)
            if part not in hints:
                return None
            tp = hints[part]
        elif _kind(tp) == "mapping":
            tp = _element(tp)
        else:
            return None
    return f"{dotted.split('[')[0]} takes {describe(tp)}"


def describe_error(exc: OmegaConfBaseException, schema: DictConfig | None = None) -> str:
    """One line for an OmegaConf error: the key, the problem and, where the schema knows, the form expected."""
    key = getattr(exc, "full_key", None)
    msg = str(exc).splitlines()[0]
    expected = expected_at(schema, key) if key and schema is not None else None
    return f"{key}: {msg}" + (f" ({expected})" if expected else "") if key else msg
