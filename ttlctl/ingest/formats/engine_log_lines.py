"""An engine log's lines, file by file: each request line a row of its program (a call, or
a bad record that rejects its program whole), each engine line the facts in force.

:mod:`ttlctl.ingest.formats.engine_log` documents the format and reads a group of files
(the logs of a fleet's replicas, a log's rotated parts) with these.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ttlctl.ingest.fields import RecordError, number, tokens, tool_name
from ttlctl.ingest.formats.engine_log_facts import Engines, Unnamed, parse_facts
from ttlctl.ingest.formats.engine_log_programs import UNPLACED
from ttlctl.ingest.formats.engine_log_repeats import Requests, logged_at
from ttlctl.ingest.formats.rotated import Part, log_of, rotations
from ttlctl.ingest.jsontext import iter_jsonl, salvaged, salvaged_id
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
    #: lines that do not parse but name their program, decided once every file is read
    #: (:meth:`settle_broken`)
    broken: list[Broken] = field(default_factory=list)
    #: (program, request id) of each whole tagged line -> where the first is
    whole: dict[tuple[str, str], tuple[Path, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.logs = [str(log_of(p)) for p in self.paths]
        self.unnamed = [Unnamed(log) for log in self.logs]
        self.kept = dict.fromkeys(self.logs, 0)
        self.repeated = dict.fromkeys(self.logs, 0)
        self.parts = [Part(path) for path in self.paths]

    def settle_broken(self, sink: RejectSink) -> None:
        """Each line that does not parse but names its program, now that every file is
        read. A copy of a request read elsewhere is a duplicate, rejected alone: a whole
        line of its request id and arrival in any file, or, its arrival cut off, a whole
        line of its request id and program in another log (a log copied while its last
        line was being written; in its own log, one id may be a client's retry or the id
        of a program run again), or the same broken line read first in another log (the
        log and its copy cut alike). Any other is a bad record of its program, which rejects
        the program whole: placed by its arrival, or, that cut off, right after the line
        before it of its program in its log (its previous call there), so that a program
        id used again rejects the run it was in; a salvaged ``is_last`` ends its run."""
        before = self._positions()
        first_cut: dict[tuple[str, str, float | None], tuple[Path, int]] = {}
        for b in self.broken:
            path = b.file.path
            copy = self._copy_of(b, first_cut)
            if copy is not None:
                # the duplicate, and why the line did not parse (a copy cut short)
                sink.reject(path, f"line {b.lineno}", f"{copy} ({b.reason})")
                self.repeated[self.logs[b.file.index]] += 1
                b.file.rejected += 1
                continue
            if b.request_id is not None:
                first_cut.setdefault((b.program, b.request_id, b.arrival), (path, b.lineno))
            at = b.arrival
            if at is None:
                earlier = before.get((self.logs[b.file.index], b.program), [])
                place = _place(b.file.path, b.file.index, b.lineno)
                k = bisect.bisect_left(earlier, (place, -math.inf))
                at = earlier[k - 1][1] if k else UNPLACED
            row: dict[str, Any] = {"_record": f"line {b.lineno}", "_line": b.lineno,
                                   "_sort": at, "_reason": b.reason}  # fmt: skip
            if b.is_last is not None:
                row["is_last"] = b.is_last
            b.file.keep(row, b.program, b.request_id, b.in_force)
            self.kept[self.logs[b.file.index]] += 1
        self.broken = []

    def _positions(
        self,
    ) -> dict[tuple[str, str], list[tuple[tuple[int, int, int], float]]]:
        """Per (log, program): the places of its whole lines in the log (oldest rotated
        part first: :func:`_place`) with their arrivals, in the log's order."""
        before: dict[tuple[str, str], list[tuple[tuple[int, int, int], float]]] = {}
        for program, _, row in self.calls:
            if program is not None and row["_sort"] != UNPLACED:
                index, lineno = row["_order"]
                before.setdefault((self.logs[index], program), []).append(
                    (_place(self.paths[index], index, lineno), row["_sort"])
                )
        for lines in before.values():
            lines.sort()
        return before

    def _copy_of(
        self, b: Broken, first_cut: dict[tuple[str, str, float | None], tuple[Path, int]]
    ) -> str | None:
        """Why ``b`` is a copy of a line read elsewhere (:meth:`settle_broken`), or None."""
        if b.request_id is None:
            return None
        path = b.file.path
        # another log (not another part of its own: a rotated log is one log)
        log = self.logs[b.file.index]
        if b.arrival is not None:
            copy = self.requests.cut_copy(b.request_id, b.arrival, path)
            if copy is not None:
                return copy
        else:
            whole = self.whole.get((b.program, b.request_id))
            if whole is not None and str(log_of(whole[0])) != log:
                return _copy_words(b, whole, path, "whole")
        cut = first_cut.get((b.program, b.request_id, b.arrival))
        if cut is not None and str(log_of(cut[0])) != log:
            return _copy_words(b, cut, path, "cut short there too")
        return None


def _place(path: Path, index: int, lineno: int) -> tuple[int, int, int]:
    """Where a line is in its log: its part's age (the oldest rotated part first), its
    file in the order given, the line."""
    return (-rotations(path), index, lineno)


def _copy_words(b: Broken, first: tuple[Path, int], path: Path, how: str) -> str:
    return (
        f"duplicate request: request_id {json.dumps(b.request_id)} of program "
        f"{json.dumps(b.program)} is logged already ({logged_at(first, path)}), {how}"
    )


@dataclass
class Broken:
    """A line of ``file`` that does not parse but names its program (and, where the line
    still holds them, its request id and arrival)."""

    file: LogFile
    lineno: int
    reason: str
    program: str
    request_id: str | None
    arrival: float | None
    #: its ``is_last`` tag, where the line still holds it
    is_last: bool | None
    #: the engine record in force at the line
    in_force: dict[str, Any] | None


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
    #: lines rejected (as a record of no program, or a duplicate)
    rejected: int = 0

    def read(self, sink: RejectSink) -> int:
        """Read the file's lines (rejecting what is no record of a program); returns the
        rows made."""
        group, path = self.group, self.path
        before = sink.count
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
            tagged = None if program in (None, "") else str(program)
            if tagged is not None and request_id not in (None, ""):
                group.whole.setdefault((tagged, str(request_id)), (path, lineno))
            self.keep(row, tagged, request_id, self.in_force)
        group.kept[group.logs[self.index]] += self.made
        group.parts[self.index].last = self.in_force
        self.rejected += sink.count - before
        return self.made

    @property
    def records(self) -> int:
        """The file's records, rows made and lines rejected (once :meth:`Group.settle_broken`
        has decided the lines that do not parse)."""
        return self.made + self.rejected

    def broken(self, lineno: int, line: str, reason: str) -> bool:
        """A line that does not parse: when it still names its program, kept to be decided
        once every file is read (:meth:`Group.settle_broken`: the program is not left with
        a hole where the call was), else rejected alone (False)."""
        program = salvaged_id(line, "program_id")
        if program is None:
            return False
        arrival = salvaged(line, "arrival_unix_s")
        last = salvaged(line, "is_last")
        self.group.broken.append(
            Broken(
                self,
                lineno,
                reason,
                program,
                salvaged_id(line, "request_id"),
                _number_or_none(arrival),
                bool(last) if last in (True, False, 0, 1) else None,
                self.in_force,
            )
        )
        return True

    def keep(
        self,
        row: dict[str, Any],
        program: str | None,
        request_id: object,
        facts: dict[str, Any] | None,
    ) -> None:
        """A request line's row: a call of ``program`` (None: untagged, ``request_id``'s own
        program), or a bad record of it; ``facts``: the engine record in force at its line."""
        group = self.group
        row["_file"] = str(self.path)
        row["_order"] = (self.index, row["_line"])
        row["replica"] = group.engines.replica(facts, group.unnamed[self.index])
        if facts is not None:
            facts["calls"] += 1
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


def _number_or_none(value: object) -> float | None:
    """A salvaged arrival as a number (None: not one)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)
