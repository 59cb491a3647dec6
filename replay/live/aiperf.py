"""A live run's calls as AIPerf's per-request records (``profile_export.jsonl``).

One JSON line per call, in send order: AIPerf's ``metadata`` (session, turn, the
request's start, first-token and end times in ns), ``metrics`` (lengths, TTFT,
latency, inter-chunk and inter-token latency) or ``error``, and what ttlctl adds
(policy, tool, reused and cached tokens, clipping) under ``"ttlctl"``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from replay.live.records import LiveCallRecord
from ttlctl.jsonio import write_atomic


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def _at_ns(record: LiveCallRecord, t: float | None) -> int | None:
    """The wall clock (ns) of ``perf_counter`` time ``t`` of this call."""
    return None if t is None else record.start_ns + round((t - record.start_s) * 1e9)


def aiperf_record(record: LiveCallRecord, session_num: int, policy: str) -> dict[str, Any]:
    """One call as a line of AIPerf's ``profile_export.jsonl``."""
    metadata = {
        "session_num": session_num,
        "x_request_id": f"{record.program_id}:{record.turn}",
        "x_correlation_id": record.program_id,
        "conversation_id": record.program_id,
        "turn_index": record.turn,
        "request_start_ns": record.start_ns,
        "request_ack_ns": _at_ns(record, record.first_token_s),
        "request_end_ns": _at_ns(record, record.end_s),
        "worker_id": "ttlctl",
        "record_processor_id": "ttlctl",
        "benchmark_phase": "profiling",
        "was_cancelled": False,
        "cancellation_time_ns": None,
    }
    extra = {
        "policy": policy,
        "tool": record.tool,
        "is_last": record.is_last,
        "reused_tokens": record.reused_tokens,
        "cached_tokens": record.cached_tokens,
        "clipped": record.clipped,
    }
    if not record.ok:
        return {
            "metadata": metadata,
            "metrics": {"error_isl": {"value": record.prompt_tokens, "unit": "tokens"}},
            "error": {
                "code": record.http_status,
                "type": "LiveReplayError",
                "message": record.error,
            },
            "ttlctl": extra,
        }
    return {"metadata": metadata, "metrics": _metrics(record), "error": None, "ttlctl": extra}


def _metrics(record: LiveCallRecord) -> dict[str, Any]:
    tpot = record.tpot_s
    metrics: dict[str, Any] = {
        "input_sequence_length": {"value": record.prompt_tokens, "unit": "tokens"},
        "time_to_first_token": {"value": _ms(record.ttft_s), "unit": "ms"},
        "request_latency": {"value": _ms(record.e2el_s or 0.0), "unit": "ms"},
        "output_token_count": {"value": record.output_tokens, "unit": "tokens"},
        "output_sequence_length": {"value": record.output_tokens, "unit": "tokens"},
        "inter_chunk_latency": {"value": [g * 1000.0 for g in record.itl_s], "unit": "ms"},
        "inter_token_latency": {"value": _ms(tpot), "unit": "ms"},
        "output_token_throughput_per_user": {
            "value": (1.0 / tpot) if tpot else None,
            "unit": "tokens/sec/user",
        },
    }
    if record.cached_tokens is not None:
        metrics["cached_tokens"] = {"value": record.cached_tokens, "unit": "tokens"}
    return metrics


def write_records(path: Path, records: Sequence[LiveCallRecord], policy: str) -> None:
    """Per-call records (AIPerf's ``profile_export.jsonl`` shape), in send order."""
    ordered = sorted(records, key=lambda r: r.start_ns)
    sessions: dict[str, int] = {}
    lines = []
    for r in ordered:
        num = sessions.setdefault(r.program_id, len(sessions))
        lines.append(json.dumps(aiperf_record(r, num, policy)) + "\n")
    write_atomic("".join(lines), path)
