"""The scheduler settings of a logged engine that the replay does not model, said where a
replay sized from that engine's log meets them.

The plugin states them in the engine log (:class:`ttlctl.engine.facts.EngineFacts`) and
ingest keeps them with the other facts. The simulators schedule as vLLM does with each at
its default; a replay of a log whose engine ran another value replays another scheduler, so
each such value gets one line (:func:`notes`), naming the setting as vLLM's flag and what the
replay does instead. Null is vLLM's default (or a release without the setting: the same).

Two are not among them, being modelled: ``max_num_active_seqs`` is vLLM's admission cap into
the running batch (``--max-num-seqs`` only sizes the model runner then), which is what the
simulators' own ``max_num_seqs`` is, so the sizing takes it (:func:`admitted`); and the
prefill chunk cap (``long_prefill_token_threshold``, adaptive or not), which the simulators
apply (:meth:`replay.scheduler_config.SimSchedulerConfig.prefill_cap`) and the sizing takes
(:func:`logged_prefill_cap`).
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
    is_default: Callable[[Any], bool]
    did: str
    #: the plugin undoes it while a bundle is loaded (an engine with one replays as modelled)
    moot_under_bundle: bool = False


def _off(value: Any) -> bool:
    return value is None or value == 0


#: the settings, in the order their lines are given
UNMODELLED: tuple[Unmodelled, ...] = (
    Unmodelled(
        "scheduling_policy",
        "--scheduling-policy",
        lambda v: v in (None, "fcfs"),
        "ordered its waiting requests by their priority; the replay's trace has none, and a "
        "stock engine replays in arrival order",
    ),
    Unmodelled(
        "max_num_queued_reqs",
        "--max-num-queued-reqs",
        lambda v: v is None,
        "refused requests past that many waiting and running; the replay queues every call",
    ),
    Unmodelled(
        "prefill_schedule_interval",
        "--prefill-schedule-interval",
        lambda v: v in (None, 1),
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
        lambda v: v is None,
        "started asynchronous KV loads while the batch was full; the replay loads a call's KV "
        "when it is admitted",
    ),
    Unmodelled(
        "kv_connector",
        "--kv-transfer-config",
        lambda v: v is None,
        "moved KV through a connector; the replay models one only as a CPU offload tier, and "
        "only when given one (--offload-tokens)",
    ),
)


def notes(entries: Sequence[Mapping[str, Any]], of: str) -> list[str]:
    """One line per setting that some of ``entries`` (one replica's facts) state at other
    than vLLM's default; ``of``: how the lines name the engine (``the log's engine`` …)."""
    out: list[str] = []
    for setting in UNMODELLED:
        values = [
            e.get(setting.fact)
            for e in entries
            if not (setting.moot_under_bundle and e.get("bundle_sha256"))
        ]
        odd = list(dict.fromkeys(v for v in values if not setting.is_default(v)))
        if odd:
            shown = ", ".join(str(v) for v in odd)
            out.append(
                f"{of} ran {setting.flag} {shown}, which the simulator does not model: the "
                f"engine {setting.did}"
            )
    return out


def admitted(entry: Mapping[str, Any]) -> int | None:
    """The running batch's cap an engine's facts state: ``max_num_active_seqs`` where it is
    set below ``max_num_seqs`` (vLLM then admits at most that many), else ``max_num_seqs``;
    None when neither is a whole number."""
    seqs, active = _whole(entry.get("max_num_seqs")), _whole(entry.get("max_num_active_seqs"))
    if seqs is None:
        return None
    return active if active is not None and active < seqs else seqs


def _whole(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return int(value) if ok else None


def logged_prefill_cap(entry: Mapping[str, Any]) -> tuple[int, bool] | None:
    """The prefill chunk cap an engine's facts state (the threshold, whether adaptive); None
    when they state none (an older plugin: the default, no cap)."""
    threshold = entry.get("long_prefill_token_threshold")
    if not isinstance(threshold, int) or isinstance(threshold, bool) or threshold < 0:
        return None
    return threshold, entry.get("long_prefill_token_threshold_adaptive") is True
