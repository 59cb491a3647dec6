"""The scheduler settings of a logged engine that the replay does not model, said where a
replay sized from that engine's log meets them.

The plugin states them in the engine log (:class:`ttlctl.engine.facts.EngineFacts`) and
ingest keeps them with the other facts. The simulators schedule as vLLM does with each at
its default; a replay of a log whose engine ran another value replays another scheduler, so
each such value gets one line (:func:`notes`), naming the setting as vLLM's flag and what the
replay does instead. Null is vLLM's default (or a release without the setting: the same).

The settings the simulators do model (the running batch's cap, the prefill chunk cap, the
whole-prompt reservation, the watermark) are not among them: the sizing takes those from the log
(:mod:`replay.logged_settings`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Unmodelled:
    """One setting: its fact, vLLM's flag, whether a value is vLLM's default, and what the
    engine did with another value that the replay does not."""

    fact: str
    flag: str
    #: whether a value (of the engine record given beside it) is vLLM's default
    is_default: Callable[[Any, Mapping[str, Any]], bool]
    did: str
    #: the plugin undoes it while a bundle is loaded (an engine with one replays as modelled)
    moot_under_bundle: bool = False
    #: the flag is said with the value the engine ran (a switch's flag says it alone)
    with_value: bool = True


def _off(value: Any, entry: Mapping[str, Any]) -> bool:
    return value is None or value == 0


def _unset(value: Any, entry: Mapping[str, Any]) -> bool:
    return value is None


#: the settings, in the order their lines are given
UNMODELLED: tuple[Unmodelled, ...] = (
    Unmodelled(
        "scheduling_policy",
        "--scheduling-policy",
        lambda v, e: v in (None, "fcfs"),
        "ordered its waiting requests by their priority; the replay's trace has none, and a "
        "stock engine replays in arrival order",
    ),
    Unmodelled(
        "max_num_queued_reqs",
        "--max-num-queued-reqs",
        _unset,
        "refused requests past that many waiting and running; the replay queues every call",
    ),
    Unmodelled(
        "prefill_schedule_interval",
        "--prefill-schedule-interval",
        lambda v, e: v in (None, 1),
        "admitted prefill only every that many steps; the replay admits it at every step",
    ),
    Unmodelled(
        "cache_aware_admission_window",
        "--cache-aware-admission-window",
        _off,
        "let the waiting requests whose prefix was cached go first within that window; the "
        "replay admits in arrival order",
        moot_under_bundle=True,
    ),
    Unmodelled(
        "max_num_inflight_kv_loads",
        "--max-num-inflight-kv-loads",
        _unset,
        "started asynchronous KV loads while the batch was full; the replay loads a call's KV "
        "when it is admitted",
    ),
    Unmodelled(
        "enable_chunked_prefill",
        "--no-enable-chunked-prefill",
        lambda v, e: v is not False,
        "scheduled a prompt only whole, in one step; the replay chunks a long prompt across steps",
        with_value=False,
    ),
    Unmodelled(
        "max_num_scheduled_tokens",
        "--max-num-scheduled-tokens",
        lambda v, e: v is None or v == e.get("max_num_batched_tokens"),
        "scheduled at most that many tokens a step; the replay schedules up to "
        "--max-num-batched-tokens",
    ),
    Unmodelled(
        "max_num_queued_tokens",
        "--max-num-queued-tokens",
        _unset,
        "refused requests past that many prompt tokens in prefill; the replay queues every call",
    ),
    Unmodelled(
        "kv_connector",
        "--kv-transfer-config",
        _unset,
        "moved KV through a connector; the replay models one only as a CPU offload tier, and "
        "only when given one (--offload-tokens)",
    ),
)


def notes(entries: Sequence[Mapping[str, Any]], of: str) -> list[str]:
    """One line per setting that some of ``entries`` (one replica's facts) state at other
    than vLLM's default; ``of``: how the lines name the engine (``the log's engine`` …)."""
    out: list[str] = []
    for setting in UNMODELLED:
        odd = list(
            dict.fromkeys(
                e.get(setting.fact)
                for e in entries
                if not (setting.moot_under_bundle and e.get("bundle_sha256"))
                and not setting.is_default(e.get(setting.fact), e)
            )
        )
        if odd:
            shown = f" {', '.join(str(v) for v in odd)}" if setting.with_value else ""
            out.append(
                f"{of} ran {setting.flag}{shown}, which the simulator does not model: the "
                f"engine {setting.did}"
            )
    return out
