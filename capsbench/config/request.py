"""What a command was asked to do, read once at the door: the command line's key=value settings as one nested
mapping (values parsed as YAML: lists [a,b], numbers, null, true/false) and the user's config=FILE, read once.
Inside the package settings travel as this structure; variants are built by merging structure, never text."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from yaml import YAMLError

from capsbench.errors import CapsbenchError, clipped

COMMENT = re.compile(r"\s#")  # where YAML would start a comment
EXAMPLE = "config=my_run.yaml holding `register: {mycaps: mypkg.caps:MyCaps}`"


@dataclass(frozen=True)
class Request:
    """The settings of one command: `line` (the command line, nested) over `file` (config=FILE) over the YAML layers.

    Args:
        line: nested settings from the command line (or from `capsbench.evaluate`'s keyword arguments).
        file: the nested settings of the user's config file ({} without one).
        file_source: how errors name that file ("config file /path/run.yaml"), "" without one.
    """

    line: dict[str, Any] = field(default_factory=dict)
    file: dict[str, Any] = field(default_factory=dict)
    file_source: str = ""

    def get(self, key: str, default: Any = None) -> Any:
        """A top-level setting as the command line, else the file, gives it."""
        return self.line.get(key, self.file.get(key, default))

    def merged(self, layer: Mapping[str, Any]) -> Request:
        """This request with `layer` (nested) merged over its command line: mappings merge, other values replace."""
        return Request(_merged(self.line, layer), self.file, self.file_source)

    def without(self, *keys: str) -> Request:
        """This request with the top-level `keys` dropped from the command line and the file."""
        return Request({k: v for k, v in self.line.items() if k not in keys},
                       {k: v for k, v in self.file.items() if k not in keys}, self.file_source)


def parse_command_line(items: list[str]) -> Request:
    """'key=value' strings -> Request; config=FILE is read here. A malformed item is a CapsbenchError."""
    pairs: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise CapsbenchError(f"expected key=value, got {item!r} (for example: suite=accuracy seeds=[0,1])")
        pairs[key] = _value(key, text)
    config = pairs.pop("config", None)
    file, source = read_user_config(None if config is None else str(config))
    return Request(nest(pairs, {k: text for k, _, text in (i.partition("=") for i in items)}), file, source)


def settings_request(settings: Mapping[str, Any]) -> Request:
    """A Request from Python keyword settings (dotted or nested keys, values as given): `capsbench.evaluate`'s door."""
    flat: dict[str, Any] = {}

    def walk(node: Mapping[str, Any], prefix: str) -> None:
        for key, value in node.items():
            dotted = f"{prefix}{key}"
            if isinstance(value, Mapping):
                walk(value, f"{dotted}.")
            else:
                flat[dotted] = str(value) if isinstance(value, Path) else value

    walk(settings, "")
    config = flat.pop("config", None)
    file, source = read_user_config(None if config is None else str(config))
    return Request(nest(flat, {k: repr(v) for k, v in flat.items()}), file, source)


def nest(pairs: Mapping[str, Any], shown: Mapping[str, str]) -> dict[str, Any]:
    """Dotted keys -> a nested mapping; a key given both a value and sub-keys is an error (`shown`: each key's text)."""
    layer: dict[str, Any] = {}
    for key, value in pairs.items():
        *parents, leaf = key.split(".")
        node = layer
        for depth, part in enumerate(parents):
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                earlier = ".".join(parents[: depth + 1])
                raise CapsbenchError(
                    f"{key}={shown.get(key, value)} sets a sub-key of {earlier}, which is also given a value; "
                    "give one of them")
        if leaf in node:
            raise CapsbenchError(
                f"{key}={shown.get(key, value)} replaces sub-keys given elsewhere on the command line; give one of them"
            )
        node[leaf] = value
    return layer


def read_user_config(value: str | None) -> tuple[dict[str, Any], str]:
    """The settings of config=FILE (layered over the suite's YAML, under the command line) and its name in errors."""
    if value is None:
        return {}, ""
    path = Path(value).expanduser()
    if path.is_dir():
        raise CapsbenchError(f"config={value} is a directory; give a YAML file of settings, e.g. {EXAMPLE}")
    if not path.is_file():
        what = "no such file" if not path.exists() else "not a regular file"
        raise CapsbenchError(f"config={value}: {what}; give a YAML file of settings, e.g. {EXAMPLE}")
    raw = path.read_bytes()
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CapsbenchError(f"config={value} is not UTF-8 text (byte {exc.start}: 0x{raw[exc.start]:02x}); save it "
                             "as UTF-8 YAML") from None
    try:
        loaded = OmegaConf.to_container(OmegaConf.load(path))
    except YAMLError as exc:
        raise CapsbenchError(f"config={value} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(loaded, dict):
        raise CapsbenchError(f"config={value} must hold a mapping of settings, e.g. {EXAMPLE}")
    return loaded, f"config file {path}"


def _value(key: str, text: str) -> Any:
    """A command-line value parsed as YAML (lists [a,b], numbers, null, true/false; anything else a string). Plain text
    stays whole: YAML would cut it at ' #' (a comment) or read ': ' as a mapping, as in a path like '/data/runs #2'."""
    try:
        value = OmegaConf.to_container(OmegaConf.from_dotlist([f"value={text}"]))["value"]  # type: ignore[index]
    except YAMLError as exc:
        problem = str(exc).splitlines()[0].split(". ")[0]
        raise CapsbenchError(
            f"cannot read {key}={clipped(text)}: {problem} (lists are written [a,b]; quote odd values)") from None
    plain = not text.lstrip().startswith(("[", "{", "'", '"'))
    return text if plain and (COMMENT.search(text) or isinstance(value, dict)) else value


def _merged(base: Mapping[str, Any], layer: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(dict(base))
    for key, value in layer.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
