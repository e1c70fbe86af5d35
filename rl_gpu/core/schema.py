"""Checking configuration dataclasses against their own annotations, and building them from JSON.

One rule set for every way a configuration arrives (flags, a ``--config`` file, a run's saved ``config.json``,
Python code): integers are ``int`` and never ``bool``, floats are finite numbers, booleans are ``bool``,
``Literal`` fields take one of their values, ``tuple[int, ...]`` holds integers, ``Path`` is a path, and a nested
dataclass is checked the same way. :func:`from_dict` also refuses keys that name no field (suggesting the
nearest one), so a misspelt setting is never silently ignored.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import types
import typing
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any, Literal, Union

from rl_gpu.core.errors import UsageError


_PLURAL = {int: "integers", float: "finite numbers", str: "strings", bool: "booleans"}


def _describe(hint: Any) -> str:
    """What a value of ``hint`` looks like, in words for an error message."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        parts = [_describe(a) for a in args if a is not type(None)]
        return " or ".join(parts) + (" or none" if type(None) in args else "")
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin is tuple:
        return f"a list of {_PLURAL.get(args[0], _describe(args[0]))}" if args else "a list"
    if hint is bool:
        return "true or false"
    if hint is int:
        return "an integer"
    if hint is float:
        return "a finite number"
    if hint is str:
        return "a string"
    if hint is Path:
        return "a path (string)"
    if dataclasses.is_dataclass(hint):
        return f"a {hint.__name__} section"
    return getattr(hint, "__name__", str(hint))


def _matches(value: Any, hint: Any) -> bool:
    if hint is Any:  # checked by its owner (a configuration's algorithm section)
        return True
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        return any(_matches(value, a) for a in args)
    if hint is type(None):
        return value is None
    if origin is Literal:
        return any(value == a and type(value) is type(a) for a in args)
    if origin is tuple:
        if not isinstance(value, tuple):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_matches(v, args[0]) for v in value)
        return len(args) == len(value) and all(_matches(v, a) for v, a in zip(value, args))
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        # An integer is a fine float (JSON writes 475.0 as 475 too); nan and inf never are.
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True


def _shown(value: Any) -> str:
    if isinstance(value, tuple):
        return repr(list(value))
    if isinstance(value, Path):
        return repr(str(value))
    return repr(value)


@functools.cache
def field_hints(cls: type) -> Mapping[str, Any]:
    """The resolved annotation of every field of the dataclass ``cls`` (``Annotated`` extras dropped), read-only.
    Resolved once per class: every command checks its configuration's dataclasses several times while parsing."""
    hints = typing.get_type_hints(cls)
    return types.MappingProxyType({f.name: hints[f.name] for f in dataclasses.fields(cls)})


def check_fields(obj: Any, label=lambda name: name) -> None:
    """Raise :class:`UsageError` naming the first field of the dataclass ``obj`` whose value does not match its
    annotation. ``label(name)`` is how a field is named in the message (e.g. as a command-line flag)."""
    for name, hint in field_hints(type(obj)).items():
        value = getattr(obj, name)
        if dataclasses.is_dataclass(hint) and isinstance(value, hint):
            continue  # it checked itself when it was built
        if not _matches(value, hint):
            raise UsageError(f"{label(name)} must be {_describe(hint)}, got {_shown(value)}")


def flag_name(field: str) -> str:
    """The command-line flag of a configuration field (``num_envs`` -> ``--num-envs``)."""
    return "--" + field.replace("_", "-")


def check_bounds(obj: Any, bounds: Mapping[str, int | None], label=lambda name: name) -> None:
    """Raise :class:`UsageError` unless each named integer field of ``obj`` is positive and at most its bound
    (``None``: no upper bound here, e.g. one that depends on the machine); a field holding ``None`` is an unset
    optional and passes. Call after :func:`check_fields`, which has checked they are integers."""
    for name, most in bounds.items():
        value = getattr(obj, name)
        if value is None:
            continue
        if value <= 0:
            raise UsageError(f"{label(name)} must be a positive integer, got {value!r}")
        if most is not None and value > most:
            raise UsageError(f"{label(name)} must be at most {most:,}, got {value:,}")


def _unknown_key(key: str, known: Collection[str], where: str) -> UsageError:
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    hint = f"; did you mean '{where}{close[0]}'?" if close else f"; known keys: {', '.join(sorted(known))}"
    return UsageError(f"unknown key '{where}{key}'{hint}")


def from_dict(cls: type, data: Mapping[str, Any], *, extra: Collection[str] = (), ignore: Collection[str] = (),
              where: str = "") -> Any:
    """Build the dataclass ``cls`` from JSON-like ``data``: lists become tuples and strings paths where the
    annotation says so, nested dataclasses are built from their sections, and every value is checked against
    its annotation before anything is constructed.

    Args:
        extra: keys that are not fields but may appear (they are dropped).
        ignore: fields whose value in ``data`` is dropped (the dataclass default stands).
        where: prefix for key names in messages (``"ppo."`` for a nested section).

    Raises:
        UsageError: an unknown key (with the nearest known one), a value of the wrong type, or one the
        dataclass's own checks refuse (a ``ValueError`` from its ``__post_init__``).
    """
    if not isinstance(data, Mapping):
        raise UsageError(f"{where.rstrip('.') or 'the configuration'} must be a JSON object, got {_shown(data)}")
    hints = field_hints(cls)
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key in extra or key in ignore:
            continue
        if key not in hints:
            raise _unknown_key(key, [*hints, *extra], where)
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            values[key] = from_dict(hint, value, where=f"{where}{key}.")
            continue
        if isinstance(value, list) and _allows(hint, tuple):
            value = tuple(value)
        elif isinstance(value, str) and _allows(hint, Path):
            value = Path(value)
        if not _matches(value, hint):
            raise UsageError(f"{where}{key} must be {_describe(hint)}, got {_shown(value)}")
        values[key] = value
    try:
        return cls(**values)
    except UsageError:
        raise
    except (TypeError, ValueError) as e:  # a required field is missing, or the dataclass's own range checks
        raise UsageError(f"{where.rstrip('.') or cls.__name__}: {e}") from None


def _allows(hint: Any, kind: type) -> bool:
    """Whether ``hint`` (possibly a union) admits values of ``kind`` (``tuple`` or ``Path``)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (Union, types.UnionType):
        return any(_allows(a, kind) for a in args)
    return hint is kind or origin is kind
