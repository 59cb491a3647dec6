"""A profile document read and checked: from a file (:func:`load`) or as parsed JSON
(:func:`from_json`), and the rule for its numbers (:func:`coefficient_problem`).

The document and the value object it becomes are :mod:`profiles.schema`'s; what can go
wrong reading one is here, so that the value object's maths reads without the checks.
Every error is a :class:`ProfileError` of one line naming the file (or ``where``) and
the field. Standard library only: the engine process checks the profile inside the
policy bundle it reads.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from profiles.new_shape import NEW_SHAPE_SHAPE
from profiles.schema import SCHEMA, Decode, Prefill, Profile, Reload
from profiles.wake import WAKE_SHAPE, wake_points
from ttlctl.errors import TtlctlError
from ttlctl.filekind import PROFILE, mistaken
from ttlctl.jsonfile import JsonFileError, read_json_object


class ProfileError(TtlctlError, ValueError):
    """A profile that cannot be used; the message names what is wrong."""


def from_json(data: Any, where: str = "profile") -> Profile:
    """Validate and build; :class:`ProfileError` names the first problem and its field."""
    if not isinstance(data, dict):
        raise ProfileError(f"{where}: not a JSON object")
    if data.get("schema") != SCHEMA:
        wrong = mistaken(data, PROFILE, "a device profile")  # a bundle, a fit … given
        if wrong is not None:
            raise ProfileError(f"{where}: {wrong}")
        if "schema" not in data:  # not "schema is None" (Python's word for a missing key)
            raise ProfileError(f"{where}: not a device profile: no schema field ({SCHEMA!r})")
        raise ProfileError(f"{where}: schema is {data.get('schema')!r}, expected {SCHEMA!r}")
    for part in ("prefill", "reload", "decode"):
        if part not in data:
            raise ProfileError(f"{where}: {part} is missing")
        if not isinstance(data[part], dict):
            # not a Python message ("'NoneType' object is not subscriptable")
            raise ProfileError(f"{where}: {part} must be an object, got {data[part]!r}")
    try:
        pre = data["prefill"]
        rel = data["reload"]
        dec = data["decode"]
        source = dict(data.get("source", {}))
        includes_step = pre.get("includes_step", "prefill_steps" not in source)
        if not isinstance(includes_step, bool):
            raise ProfileError(f"{where}: prefill.includes_step must be true or false")
        profile = Profile(
            name=str(data["name"]),
            device=str(data["device"]),
            model=str(data["model"]),
            kv_bytes_per_token=_count(data, "kv_bytes_per_token", where),
            max_context=_count(data, "max_context", where),
            prefill=Prefill(
                _number(pre, "prefill", "a", where),
                _number(pre, "prefill", "b", where),
                _number(pre, "prefill", "q", where),
                tuple((int(t), float(s)) for t, s in pre.get("points", [])),
                _optional(pre, "prefill", "rmse_s", where),
                includes_step,
                _optional(pre, "prefill", "per_cached_token_s", where) or 0.0,
                _optional(pre, "prefill", "per_context_pair_s", where),
            ),
            reload=Reload(
                _number(rel, "reload", "bandwidth_bytes_per_s", where),
                _number(rel, "reload", "latency_s", where),
            ),
            decode=Decode(
                _number(dec, "decode", "step_s", where),
                _number(dec, "decode", "per_seq_s", where),
                _number(dec, "decode", "per_kv_token_s", where),
            ),
            source=source,
            wake=_points(data.get("wake"), where, "wake", WAKE_SHAPE),
            new_shape=_points(data.get("new_shape"), where, "new_shape", NEW_SHAPE_SHAPE),
        )
    except ProfileError:
        raise  # already one line naming the field
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ProfileError(f"{where}: missing or invalid field {exc}") from None
    problem = coefficient_problem(profile)
    if problem is not None:
        raise ProfileError(f"{where}: {problem}")
    return profile


#: what a coefficient must be: finite, finite and >= 0, or finite and > 0
_FINITE, _COST, _POSITIVE = "finite", "finite and >= 0", "finite and > 0"


def coefficient_problem(profile: Profile) -> str | None:
    """THE rule for a profile's numbers, the first one broken in words naming its field
    (None: every price it makes is a time).

    Each coefficient is finite; a cost is not negative (prefill ``b``, ``q``,
    ``per_cached_token_s``, ``per_context_pair_s``, the reload's latency, the decode
    terms, and a prefill step's fixed cost :attr:`~profiles.schema.Profile.prefill_fixed_s`, named
    ``prefill.a`` or, when the fit leaves the step out, ``prefill.a + decode.step_s``);
    the reload's bandwidth, ``kv_bytes_per_token`` and ``max_context`` are positive; and
    neither fit is all zeros (a step that costs nothing would never end a simulation).
    Loading a profile applies it (:func:`from_json`), and so does what turns a profile
    built in code into another tool's terms (:mod:`profiles.router_calibration`).
    """
    pre, rel, dec = profile.prefill, profile.reload, profile.decode
    fixed = "prefill.a" if pre.includes_step else "prefill.a + decode.step_s"
    rules: list[tuple[str, float, str]] = [
        ("kv_bytes_per_token", profile.kv_bytes_per_token, _POSITIVE),
        ("max_context", profile.max_context, _POSITIVE),
        ("prefill.a", pre.a, _FINITE),
        ("decode.step_s", dec.step_s, _COST),
        (fixed, profile.prefill_fixed_s, _COST),
        ("prefill.b", pre.b, _COST),
        ("prefill.q", pre.q, _COST),
        ("prefill.per_cached_token_s", pre.per_cached_token_s, _COST),
        ("prefill.rmse_s", 0.0 if pre.rmse_s is None else pre.rmse_s, _COST),
        ("reload.bandwidth_bytes_per_s", rel.bandwidth_bytes_per_s, _POSITIVE),
        ("reload.latency_s", rel.latency_s, _COST),
        ("decode.per_seq_s", dec.per_seq_s, _COST),
        ("decode.per_kv_token_s", dec.per_kv_token_s, _COST),
    ]
    if pre.per_context_pair_s is not None:
        rules.append(("prefill.per_context_pair_s", pre.per_context_pair_s, _COST))
    for name, value, need in rules:
        low = not math.isfinite(value) or (need != _FINITE and value < 0)
        if low or (need == _POSITIVE and value <= 0):
            return f"{name} is {value!r}; a profile needs it {need}"
    if profile.prefill_fixed_s == pre.b == pre.q == 0:
        # prefill.a with the step's fixed cost when it excludes it (a fit of steps on top
        # of decode.step_s may find nothing more, and its a, b, q are then all 0)
        return f"no prefill fit ({fixed}, prefill.b and q are all 0): a prefill would cost nothing"
    if dec.step_s == dec.per_seq_s == dec.per_kv_token_s == 0:
        return (
            "no decode fit (decode.step_s, per_seq_s and per_kv_token_s are all 0); "
            "measure one with `ttlctl profile`"
        )
    return None


def _number(part: dict[str, Any], name: str, key: str, where: str) -> float:
    """``part[key]``, a number, as a float; a :class:`ProfileError` naming ``name.key``
    when it is missing or not a number (text, true)."""
    value = _optional(part, name, key, where)
    if value is None:
        raise ProfileError(f"{where}: {name}.{key} is missing")
    return value


def _optional(part: dict[str, Any], name: str, key: str, where: str) -> float | None:
    """``part[key]`` as a float, None when absent or null; a :class:`ProfileError` naming
    ``name.key`` when it is not a number."""
    value = part.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProfileError(f"{where}: {name}.{key} is {json.dumps(value)[:40]}, not a number")
    return float(value)


def _count(data: dict[str, Any], key: str, where: str) -> int:
    """``data[key]``, a whole number, or a :class:`ProfileError` naming it."""
    value = data.get(key)
    if value is None:
        raise ProfileError(f"{where}: {key} is missing")
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not whole:
        raise ProfileError(f"{where}: {key} is {json.dumps(value)[:40]}, not a whole number")
    return int(value)


def _points(raw: Any, where: str, name: str, shape: str) -> tuple[tuple[float, float], ...]:
    """The points of the field ``name`` (``wake``, ``new_shape``: the same shape), or a
    :class:`ProfileError` naming it."""
    points = wake_points(raw)
    if points is None:
        got = json.dumps(raw, default=str)[:80]
        raise ProfileError(f"{where}: {name} must be {shape} (got {got})")
    return points


def load(path: Path) -> Profile:
    """The profile in the JSON file at ``path``; :class:`ProfileError` names the file and
    the problem (:func:`ttlctl.jsonfile.read_json_object`, then the document's own rules)."""
    try:
        data = read_json_object(path, "a profile's JSON")
    except JsonFileError as exc:
        raise ProfileError(str(exc)) from None
    return from_json(data, str(path))
