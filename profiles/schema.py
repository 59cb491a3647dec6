"""A device profile: what rebuilding a context costs on the target hardware.

One JSON document (``ttlctl.profile/1``). Standard library only: the engine
process reads the profile inside the policy bundle.

- ``prefill``: seconds to prefill ``c`` tokens of context, ``a + b·c + q·c²``,
  with the measured points it was fitted on and the fit's error, and
  ``includes_step``, what those seconds are: ``true``, a whole prefill-only
  engine step (``a`` holds the fixed cost every step pays: a forward pass timed
  alone, a TTFT, a roofline's declared formula); ``false``, what the tokens add
  to a step on top of ``decode.step_s`` (a fit on engine steps that took the
  step's fixed cost out first, as ``profiles/measure_vllm.py`` does). A profile
  written before the field existed reads as ``false`` when its ``source`` holds
  ``prefill_steps`` (only the vLLM step profiler wrote that), else ``true``.
  ``per_cached_token_s`` (optional, 0 when absent): what each prompt token a
  request finds in the prefix cache still costs when it is admitted — the
  server reading the prompt and the engine hashing its blocks, work a cache hit
  does not save. A fit on fresh prompts folds that work into ``b``; a prefill
  on top of a cached prefix pays it on the cached tokens too (measured by
  ``ttlctl profile --engine``; the other profilers leave it 0). ``per_context_pair_s``
  (optional): each new token's attention over each token already in KV (a cached prefix,
  or an earlier chunk of the same prompt), where the fresh-prompt quadratic implies ``2q``
  (absent: ``2q``, so ``b·n + q·((ctx + n)² − ctx²)`` as before); a chunk of ``n`` tokens
  on ``ctx`` costs ``b·n + q·n² + per_context_pair_s·ctx·n``;
- ``reload``: bringing KV back from a host (CPU) tier: ``latency_s +
  c · kv_bytes_per_token / bandwidth_bytes_per_s``;
- ``decode``: one decode step of a batch: ``step_s + per_seq_s·seqs +
  per_kv_token_s·kv_tokens`` (used by the simulator);
- ``wake`` (optional, written only when measured): what an engine's first call after it
  has been idle costs beyond the same call on a busy engine, as ``[idle seconds, extra
  seconds]`` points (:meth:`Profile.wake_s`, :mod:`profiles.wake`): the steps that follow
  an idle spell run slower for a while (caches and clocks settling); the simulator charges
  it to the first step after each idle spell. Absent: nothing (every step priced as on a
  warm engine);
- ``new_shape`` (optional, written only when measured): what a step costs on top the first
  time the engine runs a step of that many scheduled tokens, as ``[tokens, extra seconds]``
  points (:meth:`Profile.new_shape_s`, :mod:`profiles.new_shape`): the engine builds its
  kernels for each new step size once. Absent: nothing;
- ``source``: how it was obtained (``measured``, ``roofline``, ``published``) and
  from what, so that every figure can be traced.

One definition prices a rebuild (:meth:`Profile.rebuild_prefill_s`): ``tokens``
prefilled from nothing on an idle engine in steps of at most ``chunk`` tokens;
each step pays the fixed cost once (:attr:`Profile.prefill_fixed_s`) and its
tokens :meth:`Prefill.tokens_s` (``b·n + q·((ctx + n)² − ctx²)``, or with
``per_context_pair_s`` ``b·n + q·n² + per_context_pair_s·ctx·n``). The policy's benefit
B, the baselines and the simulator's steps (``profiles/cost.py``) all price from it.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from profiles.new_shape import NEW_SHAPE_SHAPE, new_shape_s
from profiles.wake import WAKE_SHAPE, wake_points, wake_s
from ttlctl.errors import TtlctlError
from ttlctl.filekind import PROFILE, document_kind
from ttlctl.jsonfile import JsonFileError, read_json_object

SCHEMA = "ttlctl.profile/1"


class ProfileError(TtlctlError, ValueError):
    """A profile that cannot be used; the message names what is wrong."""


class PrefillDoc(TypedDict):
    a: float
    b: float
    q: float
    #: [context tokens, seconds] pairs the quadratic was fitted on
    points: list[list[float]]
    rmse_s: float | None
    #: true: a + b·c + q·c² is a whole prefill-only step; false: on top of decode.step_s
    includes_step: bool
    #: seconds per prompt token found in the prefix cache at admission (absent: 0,
    #: written only when measured)
    per_cached_token_s: NotRequired[float]
    #: seconds per (new token, token already in KV) pair (absent: 2q; written when measured)
    per_context_pair_s: NotRequired[float]


class ReloadDoc(TypedDict):
    bandwidth_bytes_per_s: float
    latency_s: float


class DecodeDoc(TypedDict):
    step_s: float
    per_seq_s: float
    per_kv_token_s: float


class ProfileDoc(TypedDict):
    """A profile as it is written (``profile.json``, a bundle's ``profile``):
    :meth:`Profile.to_json`; :func:`from_json` reads it back, checked."""

    schema: str
    name: str
    device: str
    model: str
    kv_bytes_per_token: int
    max_context: int
    prefill: PrefillDoc
    reload: ReloadDoc
    decode: DecodeDoc
    #: [idle seconds, extra seconds] of a call after an idle spell (absent: none; written
    #: only when measured)
    wake: NotRequired[list[list[float]]]
    #: [tokens, extra seconds] of a step of a size the engine had not run (absent: none)
    new_shape: NotRequired[list[list[float]]]
    #: how it was obtained: ``kind`` (measured, roofline, published …) and what the
    #: profiler recorded (free-form: each profiler writes its own keys)
    source: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Prefill:
    a: float
    b: float
    q: float
    #: (context tokens, seconds) the quadratic was fitted on
    points: tuple[tuple[int, float], ...] = ()
    rmse_s: float | None = None
    #: True: ``seconds(c)`` is a whole prefill-only step (``a`` holds the step's fixed
    #: cost); False: what ``c`` tokens add to a step on top of ``decode.step_s``
    includes_step: bool = True
    #: what each prompt token found in the prefix cache costs when its request is
    #: admitted (the server reading it, the engine hashing its block): paid by the step
    #: that computes the request's first chunk, on top of that chunk's tokens
    per_cached_token_s: float = 0.0
    #: what each new token's attention over each token already in KV (found cached, or
    #: computed by an earlier chunk) costs; None: ``2q``, the fresh-prompt quadratic's
    per_context_pair_s: float | None = None

    def seconds(self, tokens: float) -> float:
        """The fitted quadratic at ``tokens`` (what was measured; see ``includes_step``)."""
        return max(0.0, self.a + self.b * tokens + self.q * tokens * tokens)

    def tokens_s(self, context: float, chunk: float) -> float:
        """What ``chunk`` tokens on top of ``context`` add to a step: ``b·chunk`` plus
        their attention over each other (``q·chunk²``) and over what is already in KV
        (``per_context_pair_s·context·chunk``; without it, the quadratic's increment
        ``q·((context + chunk)² − context²)``)."""
        if self.per_context_pair_s is None:
            end = context + chunk
            return self.b * chunk + self.q * (end * end - context * context)
        return self.b * chunk + (self.q * chunk + self.per_context_pair_s * context) * chunk


@dataclass(frozen=True, slots=True)
class Reload:
    bandwidth_bytes_per_s: float
    latency_s: float


@dataclass(frozen=True, slots=True)
class Decode:
    step_s: float
    per_seq_s: float
    per_kv_token_s: float


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    device: str
    model: str
    kv_bytes_per_token: int
    max_context: int
    prefill: Prefill
    reload: Reload
    decode: Decode
    source: dict[str, Any] = field(default_factory=dict)
    #: (idle seconds, extra seconds) a call after an idle spell of that length was measured
    #: to cost beyond the same call on a busy engine, idle ascending (empty: none)
    wake: tuple[tuple[float, float], ...] = ()
    #: (tokens, extra seconds) a step of that many tokens was measured to cost on top the
    #: first time the engine ran that size, tokens ascending (empty: none)
    new_shape: tuple[tuple[float, float], ...] = ()

    def wake_s(self, idle_s: float) -> float:
        """What the first step after ``idle_s`` seconds with nothing to run costs beyond its
        price on a busy engine: linear between the measured points and from (0, 0), the last
        point's beyond it (0 without points)."""
        return wake_s(self.wake, idle_s)

    def new_shape_s(self, tokens: int) -> float:
        """What a step of ``tokens`` scheduled tokens costs on top the first time the engine
        runs that size (:func:`profiles.new_shape.new_shape_s`; 0 without points)."""
        return new_shape_s(self.new_shape, tokens)

    def prefill_s(self, tokens: float) -> float:
        """The fitted quadratic at ``tokens``; a rebuild's price is :meth:`rebuild_prefill_s`."""
        return self.prefill.seconds(tokens)

    @property
    def prefill_fixed_s(self) -> float:
        """The fixed cost of a step that prefills: ``a``, plus ``decode.step_s`` when the
        prefill fit does not include the step (``includes_step`` false)."""
        p = self.prefill
        return p.a if p.includes_step else p.a + self.decode.step_s

    @property
    def chunk_tokens(self) -> int | None:
        """The step budget the profile was measured with (``source.flags``), if recorded."""
        flags = self.source.get("flags")
        budget = flags.get("max_num_batched_tokens") if isinstance(flags, dict) else None
        return budget if isinstance(budget, int) and budget > 0 else None

    def rebuild_prefill_s(self, tokens: float, chunk: int | None = None) -> float:
        """THE price of a rebuild: prefill ``tokens`` from nothing on an idle engine, in
        steps of at most ``chunk`` tokens (None: one step).

        Each step pays :attr:`prefill_fixed_s` once and its tokens
        :meth:`Prefill.tokens_s`; the increments telescope, so the sum is
        ``steps·fixed + b·tokens + q·tokens²``: chunking adds only the further
        steps' fixed cost (the attention over earlier chunks is in the increments).
        With ``per_context_pair_s`` (r) measured, the chunks' own squares cost ``q`` and
        each pair of tokens in different chunks ``r``: ``steps·fixed + b·tokens +
        q·Σnᵢ² + r·(tokens² − Σnᵢ²)/2`` (one step: the quadratic itself).
        The simulator's steps (``profiles/cost.py``) charge exactly this.
        """
        if tokens <= 0:
            return 0.0
        steps = 1 if chunk is None or chunk <= 0 else -(-math.ceil(tokens) // chunk)
        p = self.prefill
        price = steps * self.prefill_fixed_s + p.b * tokens
        if p.per_context_pair_s is None:
            return price + p.q * tokens * tokens
        # the chunks' own squares, and every pair of tokens in different chunks once
        full = steps - 1
        last = tokens - full * chunk if full and chunk else tokens
        own = full * chunk * chunk + last * last if full and chunk else tokens * tokens
        return price + p.q * own + p.per_context_pair_s * (tokens * tokens - own) / 2

    def reload_s(self, tokens: float) -> float:
        r = self.reload
        return r.latency_s + tokens * self.kv_bytes_per_token / r.bandwidth_bytes_per_s

    def rebuild_s(self, tokens: float, offload: bool, chunk: int | None = None) -> float:
        """PrefillReload of docs/method.md: reload when a host tier holds the KV, else the
        prefill's price (:meth:`rebuild_prefill_s`, in steps of ``chunk`` tokens; None:
        the budget the profile was measured with, or one step when it records none)."""
        if offload:
            return self.reload_s(tokens)
        return self.rebuild_prefill_s(tokens, self.chunk_tokens if chunk is None else chunk)

    def to_json(self) -> ProfileDoc:
        pre, rel, dec = self.prefill, self.reload, self.decode
        doc: ProfileDoc = {
            "schema": SCHEMA,
            "name": self.name,
            "device": self.device,
            "model": self.model,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "max_context": self.max_context,
            "prefill": {
                "a": pre.a,
                "b": pre.b,
                "q": pre.q,
                "points": [list(p) for p in pre.points],
                "rmse_s": pre.rmse_s,
                "includes_step": pre.includes_step,
            },
            "reload": {
                "bandwidth_bytes_per_s": rel.bandwidth_bytes_per_s,
                "latency_s": rel.latency_s,
            },
            "decode": {
                "step_s": dec.step_s,
                "per_seq_s": dec.per_seq_s,
                "per_kv_token_s": dec.per_kv_token_s,
            },
            "source": copy.deepcopy(self.source),
        }
        if pre.per_cached_token_s:  # written when measured: other profiles read as before
            doc["prefill"]["per_cached_token_s"] = pre.per_cached_token_s
        if pre.per_context_pair_s is not None:
            doc["prefill"]["per_context_pair_s"] = pre.per_context_pair_s
        if self.wake:
            doc["wake"] = [[x, y] for x, y in self.wake]
        if self.new_shape:
            doc["new_shape"] = [[x, y] for x, y in self.new_shape]
        return doc


def from_json(data: Any, where: str = "profile") -> Profile:
    """Validate and build; :class:`ProfileError` names the first problem and its field."""
    if not isinstance(data, dict):
        raise ProfileError(f"{where}: not a JSON object")
    if data.get("schema") != SCHEMA:
        kind = document_kind(data)
        if kind not in (None, PROFILE):  # a bundle, a fit … given as the profile
            raise ProfileError(f"{where}: not a device profile but {kind}")
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
    terms, and a prefill step's fixed cost :attr:`Profile.prefill_fixed_s`, named
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
