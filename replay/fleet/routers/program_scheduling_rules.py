"""What vllm-router 0.1.17 refuses in ``--program-scheduling-config-json`` at start.

Seen by starting the installed 0.1.17 binary with each field at and just past each bound
(it checks the config before it contacts a worker: it exits 1 naming the field, or goes on
to wait for its workers), and read in vllm-project/router ``src/config/validation.rs``
(``validate_program_scheduling``). Where the two differ the binary wins: it takes
``max_active_programs_per_target`` 0 ("zero admission bounds mean auto sizing"), which
the source read still refused.

The router reads the JSON with serde: its whole-number fields are unsigned (``u32``,
``usize``), so a fraction, ``2.0``, a negative or a value past the type is refused; its
other numbers are ``f64`` (a JSON integer is taken); its switches take only ``true`` and
``false``. What the model itself cannot run (a value the router takes but the replay does
not model) is refused in :mod:`replay.fleet.routers.progress_ttl`, not here; so are keys
the router does not know, which its reader skips without a word.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

#: the largest value of the router's unsigned integer types (``usize`` on 64-bit hosts)
U32_MAX = 2**32 - 1
USIZE_MAX = 2**64 - 1

SWITCHES = ("binding_only", "global_queue", "enable_batch_gain_admission")
#: the choices of the router's enum fields, as its reader names them when it refuses one
CHOICES = {
    "program_scheduling_enable_key": ("auto", "vllm_xargs.agentic_context"),
    "resume_order": ("mru", "fcfs"),
    "binding_strategy": (
        "consistent_hash",
        "program_round_robin",
        "least_program_count",
        "reasoning_token_balance",
        "cache_aware",
    ),
}
#: ``f64`` fields and the range the router checks: (lowest, whether the lowest is taken);
#: every one must be finite (JSON has no other), the watermarks are checked together below
NUMBERS: dict[str, tuple[float, bool] | None] = {
    "cross_rank_headroom_ratio": (1.0, True),
    "metrics_interval_seconds": (0.0, False),
    "queue_timeout_seconds": (0.0, False),
    "force_resume_timeout_seconds": (0.0, False),
    "paused_retention_ttl_seconds": (0.0, False),
    "shared_prefix_freshness_warmup_seconds": (0.0, True),
    "shared_prefix_freshness_kv_turnovers": (0.0, False),
    "max_acting_ttl_seconds": (0.0, True),
    "high_watermark_ratio": None,
    "low_watermark_ratio": None,
}
#: whole-number fields: (lowest, largest); 0 taken where the router reads it as "off" or
#: "auto" (``admission_waiting_request_threshold``, ``max_active_programs_per_target``)
WHOLE = {
    "hash_virtual_nodes": (1, U32_MAX),
    "max_active_programs_per_target": (0, USIZE_MAX),
    "admission_waiting_request_threshold": (0, USIZE_MAX),
    "decode_buffer_tokens": (0, USIZE_MAX),
    "max_segment_rounds": (1, USIZE_MAX),
    "stats_window_size": (1, USIZE_MAX),
}
#: ``Option<usize>``: null (no token gate) or at least 1
CAPACITY = "token_capacity_per_target"
#: the calibration objects' coefficients: (lowest, whether taken, highest or None)
COEFFICIENTS: dict[str, tuple[float, bool, float | None]] = {
    "intercept_seconds": (0.0, True, None),
    "linear_seconds_per_1k_tokens": (0.0, True, None),
    "quadratic_seconds_per_1k_tokens_squared": (0.0, True, None),
    "decode_throughput_alpha": (0.0, True, 1.0),
    "fixed_step_seconds": (0.0, False, None),
    "batch_step_seconds_per_request": (0.0, True, None),
    "context_step_seconds_per_token": (0.0, True, None),
}


def router_refusal(values: Mapping[str, Any]) -> str | None:
    """The first of ``values`` (the config's fields by name) that vllm-router 0.1.17
    refuses at start, as one line naming the field and what it takes, or None."""
    for key in SWITCHES:
        if not isinstance(values[key], bool):
            return f"{key} takes true or false, got {values[key]!r}"
    for key, choices in CHOICES.items():
        if values[key] not in choices:
            return f"{key} takes {_either(choices)}, not {values[key]!r}"
    for key, lowest in NUMBERS.items():
        problem = _number_problem(key, values[key], lowest)
        if problem is not None:
            return problem
    for key, (low, high) in WHOLE.items():
        if not _whole_in(values[key], low, high):
            return f"{key} must be a whole number from {low} to {high}, got {values[key]!r}"
    cap = values[CAPACITY]
    if cap is not None and not _whole_in(cap, 1, USIZE_MAX):
        return f"{CAPACITY} must be null or a whole number from 1 to {USIZE_MAX}, got {cap!r}"
    low, high = values["low_watermark_ratio"], values["high_watermark_ratio"]
    if not 0 < low <= high <= 1:
        return (
            "the watermarks must satisfy 0 < low_watermark_ratio ≤ high_watermark_ratio ≤ 1, "
            f"got low {low!r}, high {high!r}"
        )
    force, queue = values["force_resume_timeout_seconds"], values["queue_timeout_seconds"]
    if force > queue:
        return (
            f"force_resume_timeout_seconds must not exceed queue_timeout_seconds, got {force!r} "
            f"> {queue!r}"
        )
    return None


def coefficient_refusal(name: str, key: str, value: Any) -> str | None:
    """Why the router refuses ``value`` as ``name.key`` (a calibration coefficient), or None."""
    low, low_taken, high = COEFFICIENTS[key]
    numeric = not isinstance(value, bool) and isinstance(value, int | float) and _finite(value)
    if numeric and _within(value, low, low_taken, high):
        return None
    return f"{name}.{key} must be a number {_range(low, low_taken, high)}, got {value!r}"


def _number_problem(key: str, value: Any, lowest: tuple[float, bool] | None) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{key} takes a number, got {value!r}"
    if not _finite(value):
        return f"{key} is out of range for a number, got {value!r}"
    if lowest is None:
        return None
    low, taken = lowest
    if not _within(value, low, taken, None):
        return f"{key} must be {_range(low, taken, None)}, got {value!r}"
    return None


def _within(value: float, low: float, low_taken: bool, high: float | None) -> bool:
    """Whether ``value`` is in the router's range: above ``low`` (or at it, if taken) and
    at most ``high`` (None: no upper bound)."""
    above = value > low or (value == low and low_taken)
    return above and (high is None or value <= high)


def _range(low: float, taken: bool, high: float | None) -> str:
    text = f"{'≥' if taken else '>'} {low:g}"
    return text if high is None else f"from {low:g} to {high:g}"


def _finite(value: int | float) -> bool:
    """A JSON integer too large for an ``f64`` is out of the router's range too."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _whole_in(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _either(choices: tuple[str, ...]) -> str:
    return ", ".join(choices[:-1]) + f" or {choices[-1]}"
