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
``tool``              the tool the agent said it is about to call, or null (a
                      blank one: null)
``is_last``           the client's ``is_last`` tag, or null
``arrival_unix_s``    when the engine received the request (epoch seconds)
``first_token_unix_s`` when its first token was produced, or null
``finish_unix_s``     when it finished (epoch seconds)
``prompt_tokens``     prompt length in tokens
``output_tokens``     generated tokens
``cached_tokens``     prompt tokens served from the prefix cache, or null
``finish_reason``     ``stop``, ``length``, ``abort`` …
``ttl_s``             the pin the policy chose at finish (0: not pinned), or null
``pin_skipped``       a pin chosen but not made: ``refused`` (pin cap),
                      ``deferred`` (vLLM freed the blocks late), or null
====================  ======================================================

The engine's facts: a line with ``"kind": "engine"`` (same ``schema``), written by
the plugin when it starts, when the facts change (a new bundle) and atop a file it
found empty: ``at_unix_s``, ``vllm_version``, ``model``, ``block_size``,
``kv_blocks`` (usable blocks), ``kv_tokens`` (their tokens), ``max_num_seqs``,
``max_num_batched_tokens``, ``max_model_len``, ``async_scheduling``,
``prefix_caching``, ``bundle_sha256``, ``replica`` (``TTLCTL_REPLICA``, or
null), and the scheduler's other settings with the KV connector's name
(:data:`.engine_log_facts.FACTS`; null: vLLM's default). It is not a call: it
applies to the request lines after it, up to the next one, in its file and on
into the newer parts of its log (:mod:`.rotated`). Ingest keeps each distinct one
in the trace's metadata (:func:`ttlctl.trace.io.engines`), with ``calls``, the
calls logged under it, and ``file``/``line``, where it was first seen;
``replica`` there is the same name as in the trace's ``replica`` column. A bad
one is a bad record (``bad engine record: …``).

Mapping to the canonical trace: a program's requests sorted by arrival are its
turns; ``arrival_s`` is ``arrival_unix_s`` (absolute clock, rebased by ingest);
``llm_s`` = finish − arrival; ``gap_s`` = next arrival − this finish, clamped at 0
when a client overlaps its calls; ``tool_s`` is null (an engine cannot see tool
time, only the gap); ``reused_tokens`` is null (the cache hit is not the shared
prefix: a hit depends on what survived in memory).

Several files (the logs of several replicas behind a router, or one replica's
rotated logs) are read together: a program whose calls ran on several replicas is
one program, its calls merged by arrival. Each call's ``replica`` column is the
``replica`` named by the engine record in force in its log (in its file, else at the
end of the log's older parts: :mod:`.rotated`); when none is named,
the path as given of the log the file is part of: its name less logrotate's
suffixes ``.N`` and ``.gz`` (``engine.jsonl``, ``engine.jsonl.1`` and
``engine.jsonl.2.gz`` are one log, one replica). When all the files are parts of
one log (a copy of it aside: below), null (as for one file).

Program ids used again: agent frameworks reuse session ids (a resumed session, a
retried task). A call that arrives after its program's last call (one tagged
``is_last``) starts a new program, ``<id>#2`` (then ``#3`` …, skipping names the
log uses), counted (:attr:`Parsed.reused`, the ingest report's ``reused_ids``).
Untagged requests whose ids repeat across files are told apart the same way.

A request logged twice (its ``request_id`` and ``arrival_unix_s`` on a line before, in
any of the files: its log's, a copy of the log, another replica's) is a bad record,
``duplicate request: …``, naming the line it repeats (:mod:`.engine_log_repeats`); the first
line read stands. An id alone may repeat (a client's own ids, on one replica or two): those
arrive at other times, and are calls each. A log each of whose requests is a duplicate (a
copy) is no replica: the others are named as without it (:func:`.engine_log_facts.log_names`),
and its engine records, under which no call was kept, are left out.

A bad request line (a value out of range, a field missing) is a row with a reason: it is
placed among its program's calls by its arrival (last, before the call tagged ``is_last``,
when its arrival is unknown: :mod:`.engine_log_programs`), and validation rejects its
program whole, naming it as the cause.

Aborted calls (``finish_reason`` ``abort``: the client went away, or cancelled) are
kept as calls with the tokens they produced (``output_tokens`` 0 when aborted before
the first token; their prefill was spent) and counted (:attr:`Parsed.aborted`, the
report's ``aborted``); a program whose client died ends in flight at its last call.

Programs in flight: a log read while the engine serves holds programs that have not
ended. A tagged program whose last logged call is not tagged ``is_last`` (the tag is
false, or absent) is taken as in flight when the log was read: its last logged call
becomes the last row of the program in the trace (``is_last`` true) and its trailing
``tool`` and pause are dropped, being unknown. Such programs are counted
(:attr:`Parsed.in_flight`, the ingest report's ``in_flight``), not rejected; their calls
so far count as a whole program (the fit's η sees them shorter than they will be). A
client that never sends ``is_last: 1`` makes every tagged program count here. Untagged
one-call programs (``request:<request_id>``) are not counted.

This module reads the lines; the engine records are kept by
:mod:`ttlctl.ingest.formats.engine_log_facts`, requests logged twice found by
:mod:`ttlctl.ingest.formats.engine_log_repeats`, the calls made programs by
:mod:`ttlctl.ingest.formats.engine_log_programs`, a rotated log's parts joined by
:mod:`.rotated`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ttlctl.ingest.fields import RecordError, number, tokens, tool_name
from ttlctl.ingest.formats.engine_log_facts import Engines, Unnamed, log_names, parse_facts
from ttlctl.ingest.formats.engine_log_programs import UNPLACED, as_programs
from ttlctl.ingest.formats.engine_log_repeats import Requests
from ttlctl.ingest.formats.rotated import Part, carry_over, log_of
from ttlctl.ingest.jsontext import first_object_line, iter_jsonl
from ttlctl.ingest.reader import GroupParsed, Parsed, frame_from_rows
from ttlctl.ingest.rejects import RejectSink

SCHEMA = "ttlctl.engine-log/1"
#: the ``kind`` of an engine-facts line (ttlctl.engine.facts.KIND; not imported: vLLM side)
ENGINE = "engine"
#: the ``finish_reason`` of a request the engine aborted (vLLM's; the client went away)
ABORT = "abort"


class EngineLogReader:
    name = "engine-log"
    aliases: Sequence[str] = ()

    def sniff(self, path: Path, head: bytes) -> bool:
        first = first_object_line(head)
        return first is not None and SCHEMA.encode() in first

    def read(self, path: Path, sink: RejectSink) -> Parsed:
        return self.read_group([path], sink).parsed

    def read_group(self, paths: Sequence[Path], sink: RejectSink) -> GroupParsed:
        """All the files' calls as one log: programs merged across files by arrival."""
        engines = Engines()
        requests = Requests()
        calls: list[tuple[str | None, str | None, dict[str, Any]]] = []
        records: list[int] = []
        aborted = 0
        logs = [str(log_of(p)) for p in paths]
        # the replica of a file whose engine names none: its log's, named once all are read
        unnamed = [Unnamed(log) for log in logs]
        # per log: its calls, and its requests that repeat one read before (a copy: none kept)
        kept: dict[str, int] = dict.fromkeys(logs, 0)
        repeated: dict[str, int] = dict.fromkeys(logs, 0)
        parts = [Part(path) for path in paths]
        for index, path in enumerate(paths):
            before, made = sink.count, 0
            in_force: dict[str, Any] | None = None
            for lineno, obj in iter_jsonl(path, sink):
                record = f"line {lineno}"
                if obj.get("schema") != SCHEMA:
                    sink.reject(path, record, f"not an engine-log record: {_schema_said(obj)}")
                    continue
                kind = obj.get("kind")
                if kind == ENGINE:
                    try:
                        in_force = engines.add(parse_facts(obj), path, lineno, unnamed[index])
                    except RecordError as exc:
                        sink.reject(path, record, f"bad engine record: {exc}")
                    continue
                if kind is not None:
                    sink.reject(path, record, f"not an engine-log record: kind is {kind!r}")
                    continue
                request_id = obj.get("request_id")
                program = obj.get("program_id")
                if program in (None, "") and request_id in (None, ""):
                    sink.reject(path, record, "missing request_id and program_id")
                    continue
                row = _row(obj, record, lineno)
                if request_id not in (None, "") and row["_sort"] != UNPLACED:
                    repeat = requests.repeat(str(request_id), row["_sort"], path, lineno)
                    if repeat is not None:
                        sink.reject(path, record, repeat)
                        repeated[logs[index]] += 1
                        continue
                aborted += str(obj.get("finish_reason")) == ABORT
                row["_file"] = str(path)
                row["_order"] = (index, lineno)
                row["replica"] = engines.replica(in_force, unnamed[index])
                if in_force is not None:
                    in_force["calls"] += 1
                else:  # its record may be in force from the log's earlier part: below
                    parts[index].unplaced.append(row)
                tagged = None if program in (None, "") else str(program)
                calls.append((tagged, None if tagged else str(request_id), row))
                made += 1
            records.append(made + sink.count - before)
            kept[logs[index]] += made
            parts[index].last = in_force
        carry_over(parts)
        names = log_names(logs, copies={log for log, n in repeated.items() if n and not kept[log]})
        engines.settle(names)
        for _, _, row in calls:
            if isinstance(row["replica"], Unnamed):
                row["replica"] = names.get(row["replica"].log)
        rows, in_flight, reused = as_programs(calls)
        parsed = Parsed(
            frame_from_rows(rows, None),
            records=sum(records),
            absolute_time=True,
            in_flight=sum(in_flight.values()),
            engines=tuple(engines.entries),
            reused=reused,
            aborted=aborted,
        )
        return GroupParsed(
            parsed, records=records, in_flight=[in_flight.get(str(p), 0) for p in paths]
        )


def _row(obj: dict[str, Any], record: str, lineno: int) -> dict[str, Any]:
    """A request line as a row; a bad one carries ``_reason``, and is placed among its
    program's calls by its arrival when that much of it could be read."""
    row: dict[str, Any] = {"_record": record, "_line": lineno, "_sort": UNPLACED}
    try:
        arrival = number(obj.get("arrival_unix_s"), "arrival_unix_s")
        assert arrival is not None
        row["_sort"] = arrival
        finish = number(obj.get("finish_unix_s"), "finish_unix_s")
        assert finish is not None
        if finish < arrival:
            raise RecordError(f"finish before arrival: {finish} < {arrival}")
        row.update(
            arrival_s=arrival,
            llm_s=finish - arrival,
            input_tokens=tokens(obj.get("prompt_tokens"), "prompt_tokens"),
            output_tokens=tokens(obj.get("output_tokens"), "output_tokens"),
            _finish=finish,
        )
        tool = obj.get("tool")
        row["tool"] = None if tool is None else tool_name(str(tool))
        last = obj.get("is_last")
        if last is not None:
            if last not in (True, False, 0, 1):
                raise RecordError(f"invalid is_last: {last!r}")
            row["is_last"] = bool(last)
    except RecordError as exc:
        row["_reason"] = str(exc)
    return row


READER = EngineLogReader()


def _schema_said(obj: dict[str, Any]) -> str:
    """What a line's schema is, in JSON's words (null, not Python's None)."""
    if "schema" not in obj:
        return f"no schema (an engine log's lines have {json.dumps(SCHEMA)})"
    return f"schema is {json.dumps(obj['schema'])}, not {json.dumps(SCHEMA)}"
