"""The engine log: what ttlctl's vLLM scheduler plugin writes to ``TTLCTL_LOG``.

One JSON object per line, one line per finished request (schema
``ttlctl.engine-log/1``), so production traffic can be refitted:

====================  ======================================================
key                   meaning
====================  ======================================================
``schema``            ``"ttlctl.engine-log/1"`` (required: it identifies the format)
``request_id``        the engine's request id (required)
``program_id``        from the client's ``vllm_xargs``/``X-Session-ID``; null for
                      untagged traffic, which becomes a one-call program
                      ``request:<request_id>``
``tool``              the tool the agent said it is about to call, or null
``is_last``           the client's ``is_last`` tag, or null
``arrival_unix_s``    when the engine received the request (epoch seconds)
``first_token_unix_s`` when its first token was produced, or null
``finish_unix_s``     when it finished (epoch seconds)
``prompt_tokens``     prompt length in tokens
``output_tokens``     generated tokens
``cached_tokens``     prompt tokens served from the prefix cache, or null
``finish_reason``     ``stop``, ``length``, ``abort`` …
``ttl_s``             the pin the policy chose at finish (0: not pinned), or null
====================  ======================================================

Mapping to the canonical trace: a program's requests sorted by arrival are its
turns; ``arrival_s`` is ``arrival_unix_s`` (absolute clock, rebased by ingest);
``llm_s`` = finish − arrival; ``gap_s`` = next arrival − this finish, clamped at 0
when a client overlaps its calls; ``tool_s`` is null (an engine cannot see tool
time, only the gap); ``reused_tokens`` is null (the cache hit is not the shared
prefix: a hit depends on what survived in memory).

Programs in flight: a log read while the engine serves holds programs that have not
ended. A tagged program whose last logged call is not tagged ``is_last`` (the tag is
false, or absent) is taken as in flight when the log was read: its last logged call
becomes the last row of the program in the trace (``is_last`` true) and its trailing
``tool`` and pause are dropped, being unknown. Such programs are counted
(:attr:`Parsed.in_flight`, the ingest report's ``in_flight``), not rejected; their calls
so far count as a whole program (the fit's η sees them shorter than they will be). A
client that never sends ``is_last: 1`` makes every tagged program count here. Untagged
one-call programs (``request:<request_id>``) are not counted.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

from ttlctl.ingest.reader import (
    Parsed,
    RecordError,
    first_object_line,
    frame_from_rows,
    iter_jsonl,
    number,
    tokens,
)
from ttlctl.ingest.rejects import RejectSink

SCHEMA = "ttlctl.engine-log/1"
#: the program id of an untagged request: ``request:<request_id>``
UNTAGGED = "request:"


class EngineLogReader:
    name = "engine-log"
    aliases: Sequence[str] = ()

    def sniff(self, path: Path, head: bytes) -> bool:
        first = first_object_line(head)
        return first is not None and SCHEMA.encode() in first

    def read(self, path: Path, sink: RejectSink) -> Parsed:
        programs: dict[str, list[dict[str, Any]]] = defaultdict(list)
        before = sink.count  # lines iter_jsonl rejects (not JSON) are records too
        rows_made = 0
        for lineno, obj in iter_jsonl(path, sink):
            record = f"line {lineno}"
            if obj.get("schema") != SCHEMA:
                sink.reject(
                    path, record, f"not an engine-log record: schema is {obj.get('schema')!r}"
                )
                continue
            request_id = obj.get("request_id")
            program = obj.get("program_id")
            if program in (None, ""):
                if request_id in (None, ""):
                    sink.reject(path, record, "missing request_id and program_id")
                    continue
                program = f"{UNTAGGED}{request_id}"
            programs[str(program)].append(_row(obj, record, lineno))
            rows_made += 1
        rows: list[dict[str, Any]] = []
        in_flight = 0
        for program, calls in programs.items():
            calls.sort(key=lambda r: (r["_sort"], r["_line"]))
            for turn, row in enumerate(calls):
                row["program_id"] = program
                row["turn"] = turn
            for this, nxt in pairwise(calls):
                if this.get("_finish") is not None and nxt.get("arrival_s") is not None:
                    this["gap_s"] = max(0.0, nxt["arrival_s"] - this["_finish"])
            for row in calls:
                for key in ("_sort", "_line", "_finish"):
                    row.pop(key, None)
            in_flight += _close_in_flight(program, calls)
            rows.extend(calls)
        records = rows_made + sink.count - before
        return Parsed(
            frame_from_rows(rows, path), records=records, absolute_time=True, in_flight=in_flight
        )


def _close_in_flight(program: str, calls: list[dict[str, Any]]) -> int:
    """End a program the log cut short at its last logged call; 1 if it was in flight.

    A program with a bad record is left alone: validation rejects it whole.
    """
    last = calls[-1]
    if last.get("is_last") is True or any("_reason" in row for row in calls):
        return 0
    last["is_last"] = True
    last["tool"] = None  # the tool it waits on, and the pause after it, are unknown
    last.pop("gap_s", None)
    return 0 if program.startswith(UNTAGGED) else 1


def _row(obj: dict[str, Any], record: str, lineno: int) -> dict[str, Any]:
    row: dict[str, Any] = {"_record": record, "_line": lineno}
    try:
        arrival = number(obj.get("arrival_unix_s"), "arrival_unix_s")
        finish = number(obj.get("finish_unix_s"), "finish_unix_s")
        assert arrival is not None and finish is not None
        if finish < arrival:
            raise RecordError(f"finish before arrival: {finish} < {arrival}")
        row.update(
            arrival_s=arrival,
            llm_s=finish - arrival,
            input_tokens=tokens(obj.get("prompt_tokens"), "prompt_tokens"),
            output_tokens=tokens(obj.get("output_tokens"), "output_tokens"),
            _finish=finish,
            _sort=arrival,
        )
        tool = obj.get("tool")
        row["tool"] = None if tool in (None, "") else str(tool)
        last = obj.get("is_last")
        if last is not None:
            if last not in (True, False, 0, 1):
                raise RecordError(f"invalid is_last: {last!r}")
            row["is_last"] = bool(last)
    except RecordError as exc:
        row["_reason"] = str(exc)
        row["_sort"] = float("inf")
    return row


READER = EngineLogReader()
