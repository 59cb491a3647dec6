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
``pin_skipped``       a pin chosen but not made: ``refused`` (pin cap),
                      ``deferred`` (vLLM freed the blocks late), or null
====================  ======================================================

The engine's facts: a line with ``"kind": "engine"`` (same ``schema``), written by
the plugin when it starts, when the facts change (a new bundle) and atop a file it
found empty: ``at_unix_s``, ``vllm_version``, ``model``, ``block_size``,
``kv_blocks`` (usable blocks), ``kv_tokens`` (their tokens), ``max_num_seqs``,
``max_num_batched_tokens``, ``max_model_len``, ``async_scheduling``,
``prefix_caching``, ``bundle_sha256`` and ``replica`` (``TTLCTL_REPLICA``, or
null). It is not a call: it applies to the request lines after it, up to the next
one, in its file and on into the newer parts of its log (:mod:`.rotated`).
Ingest keeps each distinct one in the trace's metadata
(:func:`ttlctl.trace.io.engines`), with ``calls``, the calls logged under it, and
``file``/``line``, where it was first seen; ``replica`` there is the same name as
in the trace's ``replica`` column. A bad one is a bad record (``bad engine
record: …``).

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
one log, null (as for one file).

Program ids used again: agent frameworks reuse session ids (a resumed session, a
retried task). A call that arrives after its program's last call (one tagged
``is_last``) starts a new program, ``<id>#2`` (then ``#3`` …, skipping names the
log uses), counted (:attr:`Parsed.reused`, the ingest report's ``reused_ids``).
Untagged requests whose ids repeat across files are told apart the same way.

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
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from ttlctl.ingest.formats.rotated import Part, carry_over, log_of
from ttlctl.ingest.reader import (
    GroupParsed,
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
#: the ``kind`` of an engine-facts line (ttlctl.engine.facts.KIND; not imported: vLLM side)
ENGINE = "engine"
#: the ``finish_reason`` of a request the engine aborted (vLLM's; the client went away)
ABORT = "abort"
#: the facts an engine record carries, with their type (bool, int or str; all nullable)
FACTS: dict[str, type] = {
    "vllm_version": str,
    "model": str,
    "block_size": int,
    "kv_blocks": int,
    "kv_tokens": int,
    "max_num_seqs": int,
    "max_num_batched_tokens": int,
    "max_model_len": int,
    "async_scheduling": bool,
    "prefix_caching": bool,
    "bundle_sha256": str,
    "replica": str,
}


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
        engines = _Engines()
        calls: list[tuple[str | None, str | None, dict[str, Any]]] = []
        records: list[int] = []
        aborted = 0
        logs = [str(log_of(p)) for p in paths]
        # the replica of a file whose engine names none: its log (None: one log in all)
        unnamed = logs if len(set(logs)) > 1 else [None] * len(paths)
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
                        in_force = engines.add(_facts(obj), path, lineno, unnamed[index])
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
            parts[index].last = in_force
        carry_over(parts)
        rows, in_flight, reused = _programs(calls)
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


@dataclass
class _Engines:
    """The distinct engine records seen, per replica, with the calls logged under each."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    _by_key: dict[tuple[Any, ...], dict[str, Any]] = field(default_factory=dict)

    def add(
        self, facts: dict[str, Any], path: Path, lineno: int, unnamed: str | None
    ) -> dict[str, Any]:
        facts = dict(facts, replica=self.replica(facts, unnamed))
        key = tuple(sorted(facts.items()))
        entry = self._by_key.get(key)
        if entry is None:
            entry = dict(facts, file=str(path), line=lineno, calls=0)
            self._by_key[key] = entry
            self.entries.append(entry)
        return entry

    @staticmethod
    def replica(facts: dict[str, Any] | None, unnamed: str | None) -> str | None:
        """The replica the engine record names, else ``unnamed`` (the file's log)."""
        named = facts.get("replica") if facts is not None else None
        return str(named) if named else unnamed


def _facts(obj: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, kind in FACTS.items():
        value = obj.get(key)
        if value is not None:
            if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
                raise RecordError(f"{key} is not a whole number: {value!r}"[:120])
            if kind is int and value < 1:
                # every whole-number fact is a size: an engine of no KV block, no sequence
                # or no token budget does not start
                raise RecordError(f"{key} must be at least 1: {value!r}")
            if kind is bool and not isinstance(value, bool):
                raise RecordError(f"{key} is not true or false: {value!r}"[:120])
            if kind is str:
                value = str(value)
        out[key] = value
    blocks, size, tokens = out["kv_blocks"], out["block_size"], out["kv_tokens"]
    if blocks is not None and size is not None:
        if tokens is None:
            out["kv_tokens"] = blocks * size
        elif tokens != blocks * size:
            # the plugin writes kv_tokens = kv_blocks × block_size: the line was edited
            raise RecordError(
                f"kv_tokens {tokens} is not kv_blocks × block_size ({blocks} × {size})"
            )
    if size is not None and out["kv_tokens"] is not None and out["kv_tokens"] < size:
        raise RecordError(f"kv_tokens {out['kv_tokens']} hold no block of {size} tokens")
    return out


def _programs(
    calls: list[tuple[str | None, str | None, dict[str, Any]]],
) -> tuple[list[dict[str, Any]], dict[str, int], int]:
    """The calls as programs: (rows, programs in flight by the file of their last call,
    programs made from a reused id)."""
    tagged: dict[str, list[dict[str, Any]]] = defaultdict(list)
    untagged: list[tuple[str, dict[str, Any]]] = []
    for program, request_id, row in calls:
        if program is not None:
            tagged[program].append(row)
        else:
            untagged.append((f"{UNTAGGED}{request_id}", row))
    taken = set(tagged)
    rows: list[dict[str, Any]] = []
    in_flight: dict[str, int] = defaultdict(int)
    reused = 0
    for program, calls_of in tagged.items():
        calls_of.sort(key=lambda r: (r["_sort"], r["_order"]))
        for n, run in enumerate(_runs(calls_of)):
            name = program if n == 0 else _fresh(program, taken)
            reused += n > 0
            if _number(name, run):
                in_flight[run[-1]["_file"]] += 1
            rows.extend(run)
    seen: set[str] = set()
    for name, row in untagged:
        if name in seen or name in taken:
            name = _fresh(name, taken | seen)
        seen.add(name)
        _number(name, [row])
        rows.append(row)
    for row in rows:
        for key in ("_sort", "_order", "_finish", "_line"):
            row.pop(key, None)
    return rows, dict(in_flight), reused


def _runs(calls: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """A program's calls (sorted by arrival) cut after each call tagged ``is_last``: each
    part is one run of the program (its id used again after it ended)."""
    runs: list[list[dict[str, Any]]] = [[]]
    for row in calls:
        # a bad record (sorted last: its arrival may be unknown) stays in the run before it
        if runs[-1] and runs[-1][-1].get("is_last") is True and "_reason" not in row:
            runs.append([])
        runs[-1].append(row)
    return runs


def _fresh(program: str, taken: set[str]) -> str:
    """``<program>#2`` (or the next number free); marks it taken."""
    n = 2
    while f"{program}#{n}" in taken:
        n += 1
    name = f"{program}#{n}"
    taken.add(name)
    return name


def _number(program: str, calls: list[dict[str, Any]]) -> bool:
    """Name and number one run's calls, fill the gaps; True if it was still in flight
    (ended here at its last logged call)."""
    for turn, row in enumerate(calls):
        row["program_id"] = program
        row["turn"] = turn
    for this, nxt in pairwise(calls):
        if this.get("_finish") is not None and nxt.get("arrival_s") is not None:
            this["gap_s"] = max(0.0, nxt["arrival_s"] - this["_finish"])
    return _close_in_flight(program, calls) == 1


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


def _schema_said(obj: dict[str, Any]) -> str:
    """What a line's schema is, in JSON's words (null, not Python's None)."""
    if "schema" not in obj:
        return f"no schema (an engine log's lines have {json.dumps(SCHEMA)})"
    return f"schema is {json.dumps(obj['schema'])}, not {json.dumps(SCHEMA)}"
