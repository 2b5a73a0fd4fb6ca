"""Typed settings from YAML and dicts: a dataclass filled from a (nested) mapping with unknown keys
and wrong types as one-line errors that list the valid keys, YAML files read with errors naming the
file, and `key.path=value` overrides. The run configuration (`asrdecode.config`), the graph build
config, the front ends' and the encoder's settings and the decoders' option classes are all read
through `dataclass_from_dict`.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from asrdecode.errors import ConfigError, one_line, shown
from asrdecode.io.lines import MAX_NESTING, check_nesting, read_text_bytes, unreadable_value

_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def _valid_keys(cls: type, prefix: str = "") -> list[str]:
    keys = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            keys += _valid_keys(tp, f"{prefix}{f.name}.")
        else:
            keys.append(f"{prefix}{f.name}")
    return keys


def _unknown_key(key: str, valid: list[str]) -> ConfigError:
    close = difflib.get_close_matches(key, valid, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return ConfigError(f"unknown config key '{shown(key)}'{hint}; valid keys: {', '.join(valid)}")


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check/convert a YAML value to the annotated type (int→float allowed, nothing else)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(errors[0] if errors else f"config key '{key}': bad value {value!r}")
    if tp is Any:
        return value
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise ConfigError(f"config key '{key}' expects a list, got {value!r}")
        (item_tp,) = typing.get_args(tp)[:1] or (Any,)
        return [_coerce(v, item_tp, key) for v in value]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"config key '{key}' expects a mapping, got {value!r}")
        return value
    if tp is float:
        value = _number_text(value)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"config key '{key}' expects a number, got {_shown_value(value)}")
        return float(value)
    if tp is int:
        value = _number_text(value)
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
            value = int(value)  # 1e3
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"config key '{key}' expects an integer, got {_shown_value(value)}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"config key '{key}' expects true/false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            if isinstance(value, int | float) and not isinstance(value, bool):
                return str(value)
            raise ConfigError(f"config key '{key}' expects a string, got {value!r}")
        return value
    if dataclasses.is_dataclass(tp):
        return dataclass_from_dict(tp, value, prefix=f"{key}.")
    return value


def _number_text(value: Any) -> Any:
    """A number written as text that YAML 1.1 reads as a string (``1e3``, ``-2E-1``) as a float;
    any other value as it is."""
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        return float(value)
    return value


def _shown_value(value: Any) -> str:
    """A bad value in a one-line error: its repr, cut to 80 characters."""
    return one_line(ValueError(repr(value)), 80)


def dataclass_from_dict(
    cls: type,
    data: dict | None,
    prefix: str = "",
    *,
    ignore: frozenset[str] | set[str] = frozenset(),
    error: type[Exception] = ConfigError,
) -> Any:
    """Build dataclass `cls` from a (nested) dict, rejecting unknown keys and wrong types.

    Keys in `ignore` are accepted and dropped (e.g. training-only options of a NeMo config);
    problems raise `error` (ConfigError for run configs, ModelError for model files).
    """
    data = data or {}
    if not isinstance(data, dict):
        raise error(f"config section '{prefix.rstrip('.') or 'root'}' must be a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    data = {k: v for k, v in data.items() if k not in ignore or k in names}
    try:
        for key in data:
            if key not in names:
                raise _unknown_key(prefix + str(key), [prefix + k for k in _valid_keys(cls)])
        kwargs = {name: _coerce(value, hints[name], prefix + name) for name, value in data.items()}
    except ConfigError as err:
        if error is ConfigError:
            raise
        raise error(str(err)) from None
    return cls(**kwargs)


_OPENS = (yaml.FlowSequenceStartToken, yaml.FlowMappingStartToken, yaml.BlockSequenceStartToken,
          yaml.BlockMappingStartToken)  # fmt: skip
_CLOSES = (yaml.FlowSequenceEndToken, yaml.FlowMappingEndToken, yaml.BlockEndToken)


def yaml_nested_too_deep(text: str) -> bool:
    """Whether YAML `text` opens more than `MAX_NESTING` collections inside one another, read from
    libyaml's token stream (linear) before PyYAML parses it: PyYAML's scanner slows quadratically
    with the open flow collections and its composer recurses, so a value nested thousands deep costs
    it seconds before the RecursionError. False without libyaml, or where its scanner stops at an
    error (the parse then reports it), except its own depth limit."""
    if not yaml.__with_libyaml__:
        return False
    depth = 0
    try:
        for token in yaml.scan(text, Loader=yaml.CSafeLoader):
            if isinstance(token, _OPENS):
                depth += 1
                if depth > MAX_NESTING:
                    return True
            elif isinstance(token, _CLOSES):
                depth -= 1
    except yaml.YAMLError as err:
        return "nesting depth" in str(getattr(err, "problem", ""))
    return False


def parse_override(text: str) -> tuple[list[str], Any]:
    """`decoder.beam=12` → (['decoder', 'beam'], 12); the value is parsed as YAML."""
    if "=" not in text:
        raise ConfigError(f"override '{shown(text)}' must look like key.path=value")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override '{shown(text)}' has an empty key")
    if yaml_nested_too_deep(raw):
        raise ConfigError(f"override {shown(key)}: nested more than {MAX_NESTING} levels deep")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    except RecursionError:
        raise ConfigError(f"override {shown(key)}: nested more than {MAX_NESTING} levels deep") from None
    except ValueError as err:
        raise ConfigError(f"override {shown(key)}: {unreadable_value(err)}") from None
    check_nesting(value, f"override {shown(key)}", ConfigError)
    return key.split("."), value


def apply_override(tree: dict, path: list[str], value: Any) -> None:
    node = tree
    for part in path[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[path[-1]] = value


def load_yaml(path: str | Path) -> dict:
    """Read a YAML config file; errors name the file."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"{p}: config file not found")
    try:
        text = read_text_bytes(p, ConfigError).decode("utf-8")
        if yaml_nested_too_deep(text):
            raise ConfigError(f"{p}: nested more than {MAX_NESTING} levels deep")
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"{p}{where}: invalid YAML ({shown(str(getattr(err, 'problem', err)))})") from None
    except RecursionError:
        raise ConfigError(f"{p}: nested more than {MAX_NESTING} levels deep") from None
    except ValueError as err:  # not UTF-8, a number of too many digits
        raise ConfigError(f"{p}: {unreadable_value(err)}") from None
    check_nesting(data, str(p), ConfigError)
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: config must be a YAML mapping")
    return data
