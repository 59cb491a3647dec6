"""An engine log's lines, file by file: each request line a row of its program (a call, or
a bad record that rejects its program whole), each engine line the facts in force.

:mod:`ttlctl.ingest.formats.engine_log` documents the format and reads a group of files
(the logs of a fleet's replicas, a log's rotated parts) with these.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ttlctl.ingest.fields import RecordError, number, tokens, tool_name
from ttlctl.ingest.formats.engine_log_facts import Engines, Unnamed, parse_facts
from ttlctl.ingest.formats.engine_log_programs import UNPLACED
from ttlctl.ingest.formats.engine_log_repeats import Requests
from ttlctl.ingest.formats.rotated import Part, log_of
from ttlctl.ingest.jsontext import iter_jsonl, salvaged_string
from ttlctl.ingest.rejects import RejectSink

SCHEMA = "ttlctl.engine-log/1"
#: the ``kind`` of an engine-facts line (ttlctl.engine.facts.KIND; not imported: vLLM side)
ENGINE = "engine"
#: the ``finish_reason`` of a request the engine aborted (vLLM's; the client went away)
ABORT = "abort"

#: a request line as (its program id, else None; its request id when untagged; its row)
Call = tuple[str | None, str | None, dict[str, Any]]


@dataclass
class Group:
    """What the files of one group have read so far."""

    paths: Sequence[Path]
    engines: Engines = field(default_factory=Engines)
    requests: Requests = field(default_factory=Requests)
    calls: list[Call] = field(default_factory=list)
    aborted: int = 0
    #: each file's log (its rotated parts are one log)
    logs: list[str] = field(init=False)
    #: the replica of a file whose engine names none: its log's, named once all are read
    unnamed: list[Unnamed] = field(init=False)
    #: per log: its calls, and its requests that repeat one read before (a copy: none kept)
    kept: dict[str, int] = field(init=False)
    repeated: dict[str, int] = field(init=False)
    parts: list[Part] = field(init=False)

    def __post_init__(self) -> None:
        self.logs = [str(log_of(p)) for p in self.paths]
        self.unnamed = [Unnamed(log) for log in self.logs]
        self.kept = dict.fromkeys(self.logs, 0)
        self.repeated = dict.fromkeys(self.logs, 0)
        self.parts = [Part(path) for path in self.paths]


@dataclass
class LogFile:
    """One file of ``group``, read into it."""

    group: Group
    index: int
    path: Path
    #: the engine record in force at the line being read (None: none in this file yet)
    in_force: dict[str, Any] | None = None
    #: rows made (calls and bad records of a program)
    made: int = 0

    def read(self, sink: RejectSink) -> int:
        """Read the file's lines (rejecting what is no record of a program); returns the
        rows made."""
        group, path = self.group, self.path
        for lineno, obj in iter_jsonl(path, sink, self.broken):
            record = f"line {lineno}"
            if obj.get("schema") != SCHEMA:
                sink.reject(path, record, f"not an engine-log record: {_schema_said(obj)}")
                continue
            kind = obj.get("kind")
            if kind == ENGINE:
                try:
                    facts = parse_facts(obj)
                    self.in_force = group.engines.add(
                        facts, path, lineno, group.unnamed[self.index]
                    )
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
            if request_id in (None, "") and "_reason" not in row:
                # every line the plugin writes has one: without it, a request logged twice
                # (a copy of the log, another replica's) could not be told
                row["_reason"] = "missing request_id"
            if request_id not in (None, "") and row["_sort"] != UNPLACED:
                repeat = group.requests.repeat(str(request_id), row["_sort"], path, lineno)
                if repeat is not None:
                    sink.reject(path, record, repeat)
                    group.repeated[group.logs[self.index]] += 1
                    continue
            group.aborted += str(obj.get("finish_reason")) == ABORT
            self.keep(row, None if program in (None, "") else str(program), request_id)
        group.kept[group.logs[self.index]] += self.made
        group.parts[self.index].last = self.in_force
        return self.made

    def broken(self, lineno: int, line: str, reason: str) -> bool:
        """A line that does not parse: a bad record of its program when the line still
        names it (the program is then rejected whole, not left with a hole where the call
        was), else rejected alone (False)."""
        program = salvaged_string(line, "program_id")
        if not program:
            return False
        bad = {"_record": f"line {lineno}", "_line": lineno, "_sort": UNPLACED, "_reason": reason}
        self.keep(bad, program, None)
        return True

    def keep(self, row: dict[str, Any], program: str | None, request_id: object) -> None:
        """A request line's row: a call of ``program`` (None: untagged, ``request_id``'s own
        program), or a bad record of it."""
        group = self.group
        row["_file"] = str(self.path)
        row["_order"] = (self.index, row["_line"])
        row["replica"] = group.engines.replica(self.in_force, group.unnamed[self.index])
        if self.in_force is not None:
            self.in_force["calls"] += 1
        else:  # its record may be in force from the log's earlier part (rotated.carry_over)
            group.parts[self.index].unplaced.append(row)
        group.calls.append((program, None if program else str(request_id), row))
        self.made += 1


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


def _schema_said(obj: dict[str, Any]) -> str:
    """What a line's schema is, in JSON's words (null, not Python's None)."""
    if "schema" not in obj:
        return f"no schema (an engine log's lines have {json.dumps(SCHEMA)})"
    return f"schema is {json.dumps(obj['schema'])}, not {json.dumps(SCHEMA)}"
