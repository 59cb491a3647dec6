"""TraceLab round traces (JSONL, one line per round = one LLM call).

Sanitized rounds of Claude Code and Codex sessions (UW SyFI TraceLab). Each line
has ``session_id``, ``round_index``, token counts, ``timing_events[]`` (typed,
timestamped events: ``user_message``, ``tool_result`` on the input side;
``reasoning``, ``text``, ``tool_call``, ``usage_report`` on the assistant side)
and ``tools[]`` (one entry per tool the round's answer called, with
``emitted_at``, ``result_at`` and ``tool_wall_latency_ms``).

Mapping (one row per line):

- ``program_id``: ``session_id``; a line without one is rejected (its program
  is unknown).
- ``turn``: ``round_index`` as given (not renumbered), so a gap or a duplicate
  round in a session is caught by validation.
- ``input_tokens``: ``input_tokens_total``; ``output_tokens``: ``output_tokens``.
- ``reused_tokens``: ``prefix_tokens`` (the cached prefix the provider reported),
  capped at ``input_tokens``; null when absent.
- ``arrival_s`` (epoch seconds, ``absolute_time``): the call is sent when its
  last input is in, so it is the timestamp of the last ``user_message`` /
  ``tool_result`` event before the first assistant-side event; a round with no
  input event uses its first event's timestamp; no events: null.
- ``llm_s``: last assistant-side event's timestamp − ``arrival_s`` (time to the
  end of the streamed answer as the agent logged it); null without both.
- ``tool``: the tools of the round may run in parallel; the row names the
  LONGEST-RUNNING one (largest ``tool_wall_latency_ms``, else ``result_at`` −
  ``emitted_at``; ties and unknown durations: the lowest ``tool_index``), because
  that tool is the one the pause before the next call waits for. A tool without
  a name (or a blank one) is ``"unknown"``; a round with no tools whose next round starts with
  ``tool_result`` events gets ``"unknown"``. Null when no tool ran (the next
  round follows a user message) and on the session's last round (a trailing
  tool call of a truncated session is not followed by any call).
- ``tool_s``: wall time of the round's tools: last ``result_at`` − first
  ``emitted_at`` (parallel tools overlap); without those timestamps, the
  largest ``tool_wall_latency_ms`` (a lower bound for several tools, exact for
  one). Null on the last round.
- ``gap_s``: next round's ``arrival_s`` − this round's end (its last
  assistant-side event), clamped to at least ``tool_s``: Claude Code starts a
  tool as soon as its ``tool_use`` block is complete, while later blocks are
  still streaming, so the measured idle gap can be shorter than the tool's wall
  time. Null on the last round or when a timestamp is missing.
- ``is_last``: left to validation.

Bad records (a row with a reason, its session rejected whole): missing or
non-numeric tokens, negative durations, a timestamp that does not parse, a tool
result before its emission, assistant output logged before the call's input.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import polars as pl

from ttlctl.ingest.fields import (
    RecordError,
    duration,
    epoch,
    integer,
    tokens,
    tool_name,
)
from ttlctl.ingest.jsontext import (
    bad_json_line,
    cut_line,
    first_object_line,
    loads,
    read_text,
    salvaged_id,
)
from ttlctl.ingest.reader import Parsed, frame_from_rows
from ttlctl.ingest.rejects import RejectSink
from ttlctl.trace.columns import TURN_MAX

INPUT_EVENTS = ("user_message", "tool_result")
ASSISTANT_EVENTS = ("reasoning", "text", "tool_call", "usage_report")


class TraceLabReader:
    name = "tracelab"
    aliases: Sequence[str] = ()

    def sniff(self, path: Path, head: bytes) -> bool:
        first = first_object_line(head)
        if first is None:
            return False
        return b'"round_index"' in first and b'"timing_events"' in first

    def read(self, path: Path, sink: RejectSink) -> Parsed:
        text = read_text(path, sink)
        if text is None:
            return Parsed(pl.LazyFrame(), records=1)
        lines: list[tuple[int, dict[str, Any] | None, str]] = []
        raw_lines: dict[int, str] = {}
        cut = cut_line(text)
        cut_short: tuple[str, str] | None = None  # the last line, cut short: where, why
        for lineno, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                obj = loads(line)
            except json.JSONDecodeError as exc:
                lines.append((lineno, None, bad_json_line(exc, cut=lineno == cut)))
                raw_lines[lineno] = line
                if lineno == cut:
                    cut_short = (f"line {lineno}", lines[-1][2])
                continue
            if isinstance(obj, dict):
                lines.append((lineno, obj, ""))
            else:
                lines.append((lineno, None, "not a JSON object"))
                raw_lines[lineno] = line
        if not any(
            o is not None and ("round_index" in o or "timing_events" in o) for _, o, _ in lines
        ):
            # no round read: a last line cut short is said to be (as every JSON-lines reader
            # says it), not taken for a file of another format; but only when it is the one
            # unreadable line: a file whose other lines do not parse either (a pretty-printed
            # JSON document, whose last line is its closing brace) is another format, not cut
            unreadable = sum(1 for _, o, _ in lines if o is None)
            where, why = (cut_short if unreadable == 1 else None) or (
                None,
                "not a TraceLab round trace: no line has round_index or timing_events",
            )
            sink.reject(path, where, why, records=max(1, len(lines)))
            return Parsed(pl.LazyFrame(), records=max(1, len(lines)))
        sessions: dict[str, list[dict[str, Any]]] = {}
        for lineno, obj, broken in lines:
            where = f"line {lineno}"
            if obj is None:
                # A broken line whose session can still be read: reject that session
                # whole rather than let it come out with a hole.
                raw = raw_lines[lineno]
                session = salvaged_id(raw, "session_id")
                if not session:
                    sink.reject(path, where, broken, raw=raw)
                    continue
                row: dict[str, Any] = {
                    "program_id": session,
                    "turn": _salvaged_round(raw),
                    "_record": where,
                    "_reason": broken,
                }
                sessions.setdefault(row["program_id"], []).append(row)
                continue
            session = obj.get("session_id")
            if not isinstance(session, (str, int)) or isinstance(session, bool) or session == "":
                sink.reject(path, where, "missing session_id", raw=_clip_obj(obj))
                continue
            row = {"program_id": str(session), "_record": where}
            try:
                _fill(row, obj)
            except RecordError as exc:
                row["_reason"] = str(exc)
            sessions.setdefault(row["program_id"], []).append(row)
        rows: list[dict[str, Any]] = []
        for session_rows in sessions.values():
            _link(session_rows)
            rows.extend(session_rows)
        return Parsed(frame_from_rows(rows, path), records=len(lines), absolute_time=True)


_ROUND_RE = re.compile(r'"round_index"\s*:\s*(\d+)')


def _salvaged_round(raw: str) -> int | None:
    """The round a line that does not parse names, read as a parsed line's is (None: none,
    or one no turn holds: the session is rejected whole either way)."""
    found = _ROUND_RE.search(raw)
    if found is None:
        return None
    try:
        return integer(found.group(1), "round_index", most=TURN_MAX)
    except RecordError:
        return None


def _clip_obj(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: obj[k] for k in list(obj)[:8] if k not in ("timing_events", "tools")}


def _fill(row: dict[str, Any], obj: dict[str, Any]) -> None:
    turn = integer(obj.get("round_index"), "round_index", most=TURN_MAX)
    row["turn"] = turn
    row["input_tokens"] = tokens(obj.get("input_tokens_total"), "input_tokens_total")
    row["output_tokens"] = tokens(obj.get("output_tokens"), "output_tokens")
    prefix = tokens(obj.get("prefix_tokens"), "prefix_tokens", required=False)
    row["reused_tokens"] = None if prefix is None else min(prefix, row["input_tokens"])

    events = obj.get("timing_events") or []
    if not isinstance(events, list):
        raise RecordError("bad timing_events: not a list")
    arrival, end = _call_window(events)
    row["arrival_s"] = arrival
    row["_end_s"] = end
    if arrival is not None and end is not None:
        if end < arrival:
            raise RecordError(
                f"out-of-order timing_events: answer at {_iso(end)} before its input at "
                f"{_iso(arrival)}"
            )
        row["llm_s"] = end - arrival
    row["_inputs"] = [
        e.get("event_type")
        for e in events
        if isinstance(e, dict) and e.get("event_type") in INPUT_EVENTS
    ]

    tools = obj.get("tools") or []
    if not isinstance(tools, list):
        raise RecordError("bad tools: not a list")
    if tools:
        row["tool"], row["tool_s"] = _tools(tools)


def _call_window(events: list[Any]) -> tuple[float | None, float | None]:
    """(arrival, end) of the call from its timing events."""
    last_input: float | None = None
    first_any: float | None = None
    end: float | None = None
    answered = False
    for index, event in enumerate(events):
        if not isinstance(event, dict):
            raise RecordError(f"bad timing_events[{index}]: not an object")
        stamp = event.get("timestamp")
        if stamp in (None, ""):
            continue
        t = epoch(stamp, f"timing_events[{index}].timestamp")
        if first_any is None:
            first_any = t
        kind = event.get("event_type")
        if kind in ASSISTANT_EVENTS:
            answered = True
            end = t if end is None else max(end, t)
        elif kind in INPUT_EVENTS and not answered:
            last_input = t
    return (last_input if last_input is not None else first_any), end


def _tools(tools: list[Any]) -> tuple[str, float | None]:
    """(name of the longest-running tool, wall time of all of them)."""
    best: tuple[float, int, int] | None = None  # (-duration, tool_index, position)
    names: list[str] = []
    starts: list[float] = []
    ends: list[float] = []
    latencies: list[float] = []
    complete = True
    for pos, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise RecordError(f"bad tools[{pos}]: not an object")
        names.append(tool_name(tool.get("tool_name")) or "unknown")
        latency_ms = duration(
            tool.get("tool_wall_latency_ms"), f"tools[{pos}].tool_wall_latency_ms"
        )
        start = tool.get("emitted_at")
        stop = tool.get("result_at")
        t0 = None if start in (None, "") else epoch(start, f"tools[{pos}].emitted_at")
        t1 = None if stop in (None, "") else epoch(stop, f"tools[{pos}].result_at")
        if t0 is not None and t1 is not None:
            if t1 < t0:
                raise RecordError(
                    f"negative tool time: tools[{pos}] result_at {stop} before emitted_at {start}"
                )
            starts.append(t0)
            ends.append(t1)
        else:
            complete = False
        seconds = (
            latency_ms / 1000.0
            if latency_ms is not None
            else (t1 - t0 if t0 is not None and t1 is not None else None)
        )
        if seconds is not None:
            latencies.append(seconds)
        index = integer(tool.get("tool_index"), f"tools[{pos}].tool_index", required=False)
        key = (-(seconds if seconds is not None else -1.0), pos if index is None else index, pos)
        if best is None or key < best:
            best = key
    assert best is not None
    name = names[best[2]]
    if complete and starts:
        return name, max(ends) - min(starts)
    return name, (max(latencies) if latencies else None)


def _link(rows: list[dict[str, Any]]) -> None:
    """gap_s from the next round's arrival; no tool after a session's last round."""
    order = sorted(rows, key=lambda r: (r.get("turn") is None, r.get("turn") or 0))
    for this, nxt in pairwise(order):
        if "_reason" in this:
            continue
        if this.get("tool") is None and "tool_result" in nxt.get("_inputs", []):
            this["tool"] = "unknown"
        end = this.get("_end_s") if this.get("_end_s") is not None else this.get("arrival_s")
        if end is None or nxt.get("arrival_s") is None:
            continue
        gap = max(0.0, nxt["arrival_s"] - end)
        tool_s = this.get("tool_s")
        this["gap_s"] = max(gap, tool_s) if tool_s is not None else gap
    if order and "_reason" not in order[-1]:
        last = order[-1]
        last["tool"] = None
        last["tool_s"] = None
        last["gap_s"] = None
    for row in rows:
        row.pop("_end_s", None)
        row.pop("_inputs", None)


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds")


READER = TraceLabReader()
