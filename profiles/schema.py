"""A device profile: what rebuilding a context costs on the target hardware.

One JSON document (``ttlctl.profile/1``). Standard library only: the engine
process reads the profile inside the policy bundle.

- ``prefill``: seconds to prefill ``c`` tokens of context, ``a + b·c + q·c²``,
  with the measured points it was fitted on and the fit's error;
- ``reload``: bringing KV back from a host (CPU) tier: ``latency_s +
  c · kv_bytes_per_token / bandwidth_bytes_per_s``;
- ``decode``: one decode step of a batch: ``step_s + per_seq_s·seqs +
  per_kv_token_s·kv_tokens`` (used by the simulator);
- ``source``: how it was obtained (``measured``, ``roofline``, ``published``) and
  from what, so that every figure can be traced.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from ttlctl.errors import TtlctlError

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

    def seconds(self, tokens: float) -> float:
        return max(0.0, self.a + self.b * tokens + self.q * tokens * tokens)


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

    def prefill_s(self, tokens: float) -> float:
        return self.prefill.seconds(tokens)

    def reload_s(self, tokens: float) -> float:
        r = self.reload
        return r.latency_s + tokens * self.kv_bytes_per_token / r.bandwidth_bytes_per_s

    def rebuild_s(self, tokens: float, offload: bool) -> float:
        """PrefillReload of docs/method.md: reload when a host tier holds the KV, else prefill."""
        return self.reload_s(tokens) if offload else self.prefill_s(tokens)

    def to_json(self) -> ProfileDoc:
        pre, rel, dec = self.prefill, self.reload, self.decode
        return {
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


def from_json(data: Any, where: str = "profile") -> Profile:
    """Validate and build; :class:`ProfileError` names the first problem."""
    if not isinstance(data, dict):
        raise ProfileError(f"{where}: not a JSON object")
    if data.get("schema") != SCHEMA:
        raise ProfileError(f"{where}: schema is {data.get('schema')!r}, expected {SCHEMA!r}")
    try:
        pre = data["prefill"]
        rel = data["reload"]
        dec = data["decode"]
        profile = Profile(
            name=str(data["name"]),
            device=str(data["device"]),
            model=str(data["model"]),
            kv_bytes_per_token=int(data["kv_bytes_per_token"]),
            max_context=int(data["max_context"]),
            prefill=Prefill(
                float(pre["a"]),
                float(pre["b"]),
                float(pre["q"]),
                tuple((int(t), float(s)) for t, s in pre.get("points", [])),
                None if pre.get("rmse_s") is None else float(pre["rmse_s"]),
            ),
            reload=Reload(float(rel["bandwidth_bytes_per_s"]), float(rel["latency_s"])),
            decode=Decode(
                float(dec["step_s"]), float(dec["per_seq_s"]), float(dec["per_kv_token_s"])
            ),
            source=dict(data.get("source", {})),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ProfileError(f"{where}: missing or invalid field {exc}") from None
    numbers = [
        profile.prefill.a,
        profile.prefill.b,
        profile.prefill.q,
        profile.reload.bandwidth_bytes_per_s,
        profile.reload.latency_s,
        profile.decode.step_s,
        profile.decode.per_seq_s,
        profile.decode.per_kv_token_s,
    ]
    if not all(math.isfinite(v) for v in numbers):
        raise ProfileError(f"{where}: non-finite coefficient")
    if profile.kv_bytes_per_token <= 0 or profile.reload.bandwidth_bytes_per_s <= 0:
        raise ProfileError(f"{where}: kv_bytes_per_token and bandwidth must be positive")
    if profile.max_context <= 0:
        raise ProfileError(f"{where}: max_context must be positive")
    return profile


def load(path: Path) -> Profile:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ProfileError(f"{path}: byte {exc.start}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{path}: line {exc.lineno}: not valid JSON ({exc.msg})") from None
    return from_json(data, str(path))
