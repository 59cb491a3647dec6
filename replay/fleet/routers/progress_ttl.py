"""vllm-router's Program-scheduling config and its Progress-TTL maths (pure).

The config is ``--program-scheduling-config-json``'s object, field for field: names and
defaults from vllm-project/router ``docs/program_scheduling.md`` ("Configuration
reference", commit 14d6d81), each name checked present in the vllm-router 0.1.17 wheel
(``vllm_router_rs.abi3.so``); what the router refuses at start is
:mod:`replay.fleet.routers.program_scheduling_rules`'s, and this module refuses besides
what the model does not run. The maths follows ``src/program_scheduling/policy.rs``
(``ProgressTtlPolicyMath``, commit 1aa3500): the cache-miss impact and the acting TTL
fitted to a rank's window of tool-call intervals (a log-normal fit, the TTL that
maximises ``P(T < d)·C − E[T; T < d] − d·P(T ≥ d)`` over 0, 0.05 s, the cap and 32
log-spaced candidates between; the router's own normal CDF approximation).

The calibration (``prefill_cost_model``, ``decode_throughput_model``) is
:mod:`profiles.router_calibration`'s: the router's reference coefficients, or a ttlctl
profile converted.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from profiles.router_calibration import (
    DecodeThroughputModel,
    PrefillCostModel,
    RouterCalibration,
)
from replay.fleet.routers.program_scheduling_rules import coefficient_refusal, router_refusal
from ttlctl.errors import FlagError
from ttlctl.router_doc import ENABLE_KEY

#: the shortest metrics interval the model runs (s): each tick is an event of the replay
#: while the router retains calls, so an hour of retained calls at 1 ms is 3.6M events;
#: vllm-router takes any positive interval
MODEL_TICK_FLOOR_S = 1e-3
FLAG = "--program-scheduling-config-json"

#: the router's built-in coefficients (policy.rs ``Default`` impls)
REFERENCE_PREFILL = PrefillCostModel(
    intercept_seconds=0.06600061907132926,
    linear_seconds_per_1k_tokens=0.05702024012166613,
    quadratic_seconds_per_1k_tokens_squared=0.0044057347937978475,
    decode_throughput_alpha=0.15,
)
REFERENCE_DECODE = DecodeThroughputModel(
    fixed_step_seconds=0.010635218423115973,
    batch_step_seconds_per_request=0.0004192803698834784,
    context_step_seconds_per_token=1.420458414996201e-7,
)

BINDING_STRATEGIES = ("consistent_hash", "program_round_robin", "least_program_count")
#: the router's own name of ``token_capacity_per_target``, which it takes as an alias
#: (both given: its reader stops on a duplicate field)
CAPACITY_ALIAS = "token_capacity_per_dp_rank"
#: fields vllm-router 0.1.17 has that the replay does not model (its reader takes them)
UNMODELLED = {
    "pd": "prefill/decode-disaggregated Program scheduling",
    "prediction_profile": "return-time and output-length prediction profiles",
}


@dataclass(frozen=True, slots=True)
class ProgramSchedulingConfig:
    """The fields of ``program_scheduling`` other than the two calibration models, with
    the router's defaults. The model acts on those marked *modelled* in
    :mod:`replay.fleet.routers.program_scheduling`; the rest are kept and printed."""

    program_scheduling_enable_key: str = ENABLE_KEY
    binding_only: bool = False
    global_queue: bool = False
    resume_order: str = "mru"
    cross_rank_headroom_ratio: float = 1.2
    binding_strategy: str = "consistent_hash"
    hash_virtual_nodes: int = 160
    token_capacity_per_target: int | None = None
    max_active_programs_per_target: int = 64
    metrics_interval_seconds: float = 1.0
    admission_waiting_request_threshold: int = 1
    queue_timeout_seconds: float = 600.0
    force_resume_timeout_seconds: float = 300.0
    paused_retention_ttl_seconds: float = 1800.0
    shared_prefix_freshness_warmup_seconds: float = 100.0
    shared_prefix_freshness_kv_turnovers: float = 2.0
    decode_buffer_tokens: int = 100
    max_acting_ttl_seconds: float = 10.0
    high_watermark_ratio: float = 1.0
    low_watermark_ratio: float = 1.0
    max_segment_rounds: int = 14
    stats_window_size: int = 100
    enable_batch_gain_admission: bool = True

    def __post_init__(self) -> None:
        bad = _first_bad(self)
        if bad is not None:
            raise FlagError(FLAG, bad)

    @classmethod
    def from_json(
        cls, text: str | Mapping[str, Any]
    ) -> tuple[ProgramSchedulingConfig, dict[str, Any]]:
        """The config and the calibration objects given with it (``prefill_cost_model``,
        ``decode_throughput_model``: returned apart, they override the calibration)."""
        try:
            doc = (
                json.loads(text, parse_constant=_no_constant, parse_float=_finite, parse_int=_whole)
                if isinstance(text, str)
                else dict(text)
            )
        except json.JSONDecodeError as e:
            raise FlagError(FLAG, f"not JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(doc, dict):
            raise FlagError(FLAG, "takes a JSON object")
        known = {f.name: f for f in fields(cls)}
        calibration = {
            k: doc.pop(k) for k in ("prefill_cost_model", "decode_throughput_model") if k in doc
        }
        if CAPACITY_ALIAS in doc:
            if "token_capacity_per_target" in doc:
                raise FlagError(
                    FLAG,
                    f"token_capacity_per_target and {CAPACITY_ALIAS} are one field "
                    "(vllm-router takes either name, not both)",
                )
            doc["token_capacity_per_target"] = doc.pop(CAPACITY_ALIAS)
        for key in doc:
            if key in UNMODELLED:
                raise FlagError(FLAG, f"{key} ({UNMODELLED[key]}) is not modelled")
            if key not in known:
                raise FlagError(
                    FLAG, f"unknown field {key!r} (vllm-router 0.1.17 has no such field)"
                )
        calibration_of(calibration, None)  # each object's fields checked here, not mid-replay
        return cls(**doc), calibration

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _no_constant(name: str) -> float:
    """Python's JSON reader takes NaN and Infinity, JSON does not: vllm-router stops at
    start on them, and a replay's --json would carry them."""
    raise FlagError(FLAG, f"not JSON ({name} is not a JSON number)")


def _finite(text: str) -> float:
    """A JSON number too large for a float (``1e400``) reads as infinity: refused."""
    value = float(text)
    if not math.isfinite(value):
        raise FlagError(FLAG, f"{text} is out of range for a number")
    return value


def _whole(text: str) -> int:
    """A JSON integer of more digits than Python reads (4,300) is refused, where the reader
    raised (no field takes a number that long; shorter ones are checked by range)."""
    try:
        return int(text)
    except ValueError:
        shown = f"{text[:24]}… ({len(text):,} digits)"
        raise FlagError(FLAG, f"{shown} is out of range for a number") from None


def _first_bad(cfg: ProgramSchedulingConfig) -> str | None:
    """What vllm-router refuses (:mod:`~replay.fleet.routers.program_scheduling_rules`),
    then what it takes but the model does not run, or None."""
    refused = router_refusal(cfg.to_json())
    if refused is not None:
        return refused
    if cfg.program_scheduling_enable_key != ENABLE_KEY:
        return (
            f"program_scheduling_enable_key must be auto here, not "
            f"{cfg.program_scheduling_enable_key!r}: the replay's calls carry X-Session-ID "
            "(vllm-router also takes vllm_xargs.agentic_context, which they do not carry, "
            "so every call would skip Program scheduling)"
        )
    if cfg.binding_strategy not in BINDING_STRATEGIES:
        return (
            f"binding_strategy {cfg.binding_strategy!r} is not modelled "
            f"(the replay has {', '.join(BINDING_STRATEGIES)})"
        )
    if cfg.global_queue:
        return (
            "global_queue true (cross-rank resume) is not modelled; the router's default is false"
        )
    if cfg.metrics_interval_seconds < MODEL_TICK_FLOOR_S:
        return (
            f"metrics_interval_seconds below {MODEL_TICK_FLOOR_S:g} is not modelled, got "
            f"{cfg.metrics_interval_seconds!r}: each metrics tick is an event of the replay "
            "while calls are retained (vllm-router takes it; its default is 1)"
        )
    return None


def calibration_of(
    given: Mapping[str, Any], profile: RouterCalibration | None
) -> tuple[PrefillCostModel, DecodeThroughputModel]:
    """The coefficients the router runs on: the profile's (None: the router's reference
    ones), with any object given in the config JSON overriding field by field."""
    pre = REFERENCE_PREFILL if profile is None else profile.prefill
    dec = REFERENCE_DECODE if profile is None else profile.decode
    pre = PrefillCostModel(**_overridden(pre, given, "prefill_cost_model"))
    dec = DecodeThroughputModel(**_overridden(dec, given, "decode_throughput_model"))
    return pre, dec


def _overridden(model: Any, given: Mapping[str, Any], name: str) -> dict[str, Any]:
    """``model``'s coefficients with those the config's object ``name`` gives, each checked
    (a known field, in the router's range: finite and ≥ 0, ``decode_throughput_alpha`` at
    most 1, ``fixed_step_seconds`` above 0)."""
    obj = given.get(name, {})
    if not isinstance(obj, Mapping):
        raise FlagError(FLAG, f"{name} takes a JSON object")
    out = _as_dict(model)
    for key, value in obj.items():
        if key not in out:
            raise FlagError(
                FLAG, f"unknown field '{name}.{key}' (vllm-router 0.1.17 has no such field)"
            )
        refused = coefficient_refusal(name, key, value)
        if refused is not None:
            raise FlagError(FLAG, refused)
        out[key] = float(value)
    return out


def _as_dict(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


# ---------------------------------------------------------------- policy.rs's maths


def normal_cdf(value: float) -> float:
    """The router's normal CDF (Abramowitz–Stegun 7.1.26 for erf, as policy.rs has it)."""
    x = value / math.sqrt(2.0)
    sign = -1.0 if x < 0 else 1.0
    x = abs(x)
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = (
        ((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592
    ) * t
    erf = sign * (1.0 - poly * math.exp(-x * x))
    return min(1.0, max(0.0, 0.5 * (1.0 + erf)))


def fitted_acting_ttl(
    intervals: Sequence[float],
    window: int,
    max_acting_ttl_s: float,
    cache_miss_impact_s: float,
) -> float:
    """The acting TTL (s) for a request whose miss would cost ``cache_miss_impact_s``,
    from a rank's last tool-call intervals: 0 until ``window`` samples are in."""
    if len(intervals) < window:
        return 0.0
    xs = [i for i in intervals if math.isfinite(i) and i > 0]
    if not xs:
        return 0.0
    logs = [math.log(i) for i in xs]
    mu = sum(logs) / len(logs)
    sigma = max(math.sqrt(sum((v - mu) ** 2 for v in logs) / len(logs)), 1e-6)
    cap = min(max_acting_ttl_s, cache_miss_impact_s)
    if cap <= 0 or cache_miss_impact_s <= 0:
        return 0.0
    lo = min(0.05, cap)
    candidates = [0.0, lo, cap]
    if cap > lo:
        a, b = math.log(lo), math.log(cap)
        candidates += [math.exp(a + (b - a) * k / 31.0) for k in range(32)]
    mean = math.exp(mu + sigma * sigma / 2.0)
    best, best_u = 0.0, -math.inf
    for ttl in candidates:
        if ttl <= 0:
            u = 0.0
        else:
            hit = normal_cdf((math.log(ttl) - mu) / sigma)
            truncated = mean * normal_cdf((math.log(ttl) - mu - sigma * sigma) / sigma)
            u = cache_miss_impact_s * hit - truncated - ttl * (1.0 - hit)
        if u >= best_u:  # a later candidate wins a tie, as in the router
            best, best_u = ttl, u
    return 0.0 if best_u < 0 else best
