"""Check a JSON document against the TypedDict that declares it, at run time.

mypy checks the code that builds and reads the documents; this checks that what a
command really writes has the declared keys (every required one, no undeclared one)
and values of the declared kinds, all the way down.
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any, NotRequired, Required, Union, get_args, get_origin, get_type_hints


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__total__")


def _fields(tp: Any) -> dict[str, tuple[Any, bool]]:
    """key -> (type, required); NotRequired read from the hints (a string annotation
    hides it from ``__required_keys__`` before Python 3.13)."""
    out = {}
    for key, hint in get_type_hints(tp, include_extras=True).items():
        origin = get_origin(hint)
        if origin is NotRequired:
            out[key] = (get_args(hint)[0], False)
        elif origin is Required:
            out[key] = (get_args(hint)[0], True)
        else:
            out[key] = (hint, key not in tp.__optional_keys__)
    return out


def problems(value: Any, tp: Any, where: str = "$") -> list[str]:
    """Every place where ``value`` does not have the shape ``tp`` declares."""
    if tp is Any or tp is object:
        return []
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        options = [problems(value, t, where) for t in get_args(tp)]
        return [] if any(not o for o in options) else min(options, key=len)
    if tp is type(None) or tp is None:
        return [] if value is None else [f"{where}: {value!r} is not null"]
    if tp is bool:
        return [] if isinstance(value, bool) else [f"{where}: {value!r} is not a bool"]
    if tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return [] if ok else [f"{where}: {value!r} is not an int"]
    if tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return [] if ok else [f"{where}: {value!r} is not a number"]
    if tp is str:
        return [] if isinstance(value, str) else [f"{where}: {value!r} is not a string"]
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: not a list"]
        (item,) = get_args(tp)
        return [p for i, v in enumerate(value) for p in problems(v, item, f"{where}[{i}]")]
    if origin in (dict, Mapping):
        if not isinstance(value, dict):
            return [f"{where}: not an object"]
        _, item = get_args(tp)
        return [p for k, v in value.items() for p in problems(v, item, f"{where}.{k}")]
    if _is_typeddict(tp):
        if not isinstance(value, dict):
            return [f"{where}: not an object ({tp.__name__})"]
        fields = _fields(tp)
        found = [f"{where}: {tp.__name__} has no key {k!r}" for k in value if k not in fields]
        for key, (hint, required) in fields.items():
            if key in value:
                found += problems(value[key], hint, f"{where}.{key}")
            elif required:
                found.append(f"{where}: missing {key!r} ({tp.__name__})")
        return found
    raise TypeError(f"{where}: no check for {tp!r}")


def conforms(value: Any, tp: Any) -> None:
    """Assert that ``value`` has the shape of ``tp``, listing every difference."""
    found = problems(value, tp)
    assert not found, "\n".join(found[:20])
