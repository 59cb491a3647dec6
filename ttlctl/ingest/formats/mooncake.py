"""Mooncake FAST'25 request traces (JSONL), with programs inferred from shared prefixes.

Format (github.com/kvcache-ai/Mooncake ``FAST25-release/traces``): one request
per line, ``{"timestamp": ms, "input_length": n, "output_length": m,
"hash_ids": [...]}``, where ``hash_ids`` name the prompt's 512-token blocks with
chained (prefix) hashing: two prompts share a leading hash id only if they share
every token up to the end of that block. Lines may also carry ``session_id`` and
``delay`` / ``delay_ms`` (milliseconds of idle time before this turn, as in
NVIDIA AIPerf's multi-turn Mooncake traces). Numbers may be numeric strings.

Programs. A line with ``session_id`` belongs to program ``<stem>-<session_id>``,
its turns in file order. Lines without one carry no session, so programs are
inferred by this deterministic heuristic:

1. Lines are taken in ``timestamp`` order (file order among equal timestamps).
2. Every program is open for its whole life, and is known by its last request.
   Its *key* is that request's ``hash_ids`` less the last block (which may be
   partial, and a partial block's hash changes once the conversation grows).
3. A request continues a program when that program's key is a non-empty
   prefix of the request's ``hash_ids`` and the request's ``input_length`` is
   greater than the program's last ``input_length`` (a next turn re-sends the
   whole conversation and adds to it).
4. If several programs match, the longest key wins; among keys of equal length,
   the program whose last request came most recently. Otherwise (no match, or
   no ``hash_ids``) the request starts a new program ``<stem>-mooncake-<n>``
   (n = 0, 1, ... in order of creation).

So two sessions that only share a system prompt are never merged: the first
session's key covers its whole conversation, not just the system prompt. Lookup
is a dict keyed on (key length, key's last hash id), checked against the full
key, so each request costs O(len(hash_ids)) dictionary probes.

Canonical columns, per request:

- ``arrival_s``: ``timestamp`` / 1000, a relative clock (not rebased). A
  session's first turn without ``timestamp`` starts at 0 s; later turns without
  one have no arrival (replay paces them by ``gap_s``).
- ``input_tokens`` / ``output_tokens``: ``input_length`` / ``output_length``.
- ``reused_tokens``: leading ``hash_ids`` shared with the program's previous
  request, times 512, capped at ``input_length``; 0 on turn 0; null when either
  request has no ``hash_ids``.
- ``tool``: on every call another call of its program follows, the tool the next
  line's ``tool_events`` (agentic Mooncake, as ``ttlctl export`` and Dynamo write it)
  name: the ``tool_class`` of its events when they all name one; null when the list is
  empty (no tool ran: a person spoke, as ``ttlctl export`` writes a call with no tool);
  else ``"unknown"`` (the pause is an unknown tool or user); null on the last call.
- ``tool_s``: that tool's ``duration_ms`` / 1000 when the next line has one event with a
  duration; else null (not recorded: events run together have no one duration).
- ``llm_s``: null (not recorded).
- ``gap_s``: the next turn's ``delay`` (ms → s) when given; else the next
  arrival minus this arrival. The latter is an UPPER BOUND of the idle gap: it
  includes this call's own LLM time, which the trace does not record. Null on
  the last call.
- ``is_last``: left to validation.
- ``prefix_hashes`` / ``prefix_block_tokens``: the request's leading ``hash_ids``
  that requests of at least one *other* program also carry (the blocks other programs
  share: a system prompt, a common document), full blocks only (at most
  ``input_length`` // 512), with 512; null when it shares none. Hash ids are kept as
  64-bit integers (a string id, or an integer out of that range, by its BLAKE2b digest).
  The program's own repeated blocks stay in ``reused_tokens``.

Bad lines: a line that is not JSON, or whose tokens/timestamp/hash_ids are
broken, is rejected on its own when its program must be inferred (the program
cannot be known); a broken line of a ``session_id`` program rejects that
program, one that does not parse too when it still names its ``session_id``.

This module reads the lines; the inference of programs is
:mod:`ttlctl.ingest.formats.mooncake_programs`, the rows of a program
:mod:`ttlctl.ingest.formats.mooncake_rows`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ttlctl.ingest.fields import RecordError, duration, number, tokens
from ttlctl.ingest.formats.mooncake_programs import Hash, MooncakeRequest, infer_programs
from ttlctl.ingest.formats.mooncake_rows import program_rows, programs_per_hash, session_rows
from ttlctl.ingest.jsontext import first_object_line, iter_jsonl, salvaged_id
from ttlctl.ingest.rawfile import logical
from ttlctl.ingest.reader import Parsed, frame_from_rows
from ttlctl.ingest.rejects import RejectSink


class MooncakeReader:
    name = "mooncake"
    aliases: Sequence[str] = ()

    def sniff(self, path: Path, head: bytes) -> bool:
        first = first_object_line(head)
        if first is None:
            return False
        return b'"input_length"' in first and (
            b'"hash_ids"' in first or b'"output_length"' in first
        )

    def read(self, path: Path, sink: RejectSink) -> Parsed:
        stem = logical(path).stem
        before = sink.count
        sessions: dict[str, list[tuple[MooncakeRequest | None, dict[str, Any]]]] = {}
        loose: list[MooncakeRequest] = []

        def broken(lineno: int, line: str, reason: str) -> bool:
            """A line that does not parse: a bad record of its session when it still names
            one (the session is then rejected whole, not kept with a hole), else rejected
            alone (its program, inferred, cannot be known)."""
            session = _session(salvaged_id(line, "session_id"))
            if session is None:
                return False
            sessions.setdefault(session, []).append(
                (None, {"_reason": reason, "_record": f"line {lineno}"})
            )
            return True

        for lineno, obj in iter_jsonl(path, sink, broken):
            record = f"line {lineno}"
            session = _session(obj.get("session_id"))
            if session is None and not _looks_like_mooncake(obj):
                sink.reject(
                    path, record, "not a mooncake record: no input_length or hash_ids", raw=obj
                )
                continue
            try:
                req = _parse(obj, lineno, need_timestamp=session is None)
            except RecordError as exc:
                if session is None:
                    sink.reject(path, record, str(exc), raw=obj)
                else:
                    sessions.setdefault(session, []).append(
                        (None, {"_reason": str(exc), "_record": record})
                    )
                continue
            if session is None:
                loose.append(req)
            else:
                sessions.setdefault(session, []).append((req, {"_record": record}))

        rows: list[dict[str, Any]] = []
        inferred = infer_programs(loose, stem)
        groups: list[Sequence[MooncakeRequest | None]] = [
            [req for req, _ in items] for items in sessions.values()
        ]
        count = programs_per_hash(groups + [p.requests for p in inferred])
        for session, items in sessions.items():
            rows.extend(session_rows(f"{stem}-{session}", items, count))
        for program in inferred:
            rows.extend(program_rows(program, count))

        # every line is a row or a reject (iter_jsonl's or ours), all counted by the sink
        records = len(rows) + (sink.count - before)
        return Parsed(frame_from_rows(rows, path), records=records)


# ---------------------------------------------------------------- parsing


def _looks_like_mooncake(obj: dict[str, Any]) -> bool:
    return "input_length" in obj or "hash_ids" in obj


def _session(value: Any) -> str | None:
    if value is None or isinstance(value, (dict, list, bool)):
        return None
    text = str(value).strip()
    return text or None


def _parse(obj: dict[str, Any], lineno: int, *, need_timestamp: bool) -> MooncakeRequest:
    ts = number(obj.get("timestamp"), "timestamp", required=need_timestamp)
    if ts is not None and ts < 0:
        raise RecordError(f"negative timestamp: {ts!r}")
    inp = tokens(obj.get("input_length"), "input_length")
    out = tokens(obj.get("output_length"), "output_length")
    assert inp is not None and out is not None
    delay = duration(obj.get("delay"), "delay")
    if delay is None:
        delay = duration(obj.get("delay_ms"), "delay_ms")
    events = obj.get("tool_events")
    tool, tool_s = _tool_events(events)
    return MooncakeRequest(
        lineno=lineno,
        timestamp_ms=ts,
        input_tokens=inp,
        output_tokens=out,
        hash_ids=_hash_ids(obj.get("hash_ids")),
        delay_s=None if delay is None else delay / 1000.0,
        tool_before=tool,
        tool_before_s=tool_s,
        no_tool_before=events == [],
    )


def _tool_events(value: Any) -> tuple[str | None, float | None]:
    """Agentic Mooncake's ``tool_events``: the tool that ran before the request (the one
    ``tool_class`` its events name, else None) and its duration in seconds (one event's
    ``duration_ms``, else None)."""
    if value is None:
        return None, None
    if not isinstance(value, list) or not all(isinstance(e, dict) for e in value):
        raise RecordError("invalid tool_events: not a list of objects")
    classes = {e.get("tool_class") for e in value}
    named = [c for c in classes if isinstance(c, str) and c.strip()]
    tool = named[0].strip() if len(named) == 1 and len(classes) == 1 else None
    seconds = None
    if len(value) == 1:
        ms = duration(value[0].get("duration_ms"), "tool_events duration_ms")
        seconds = None if ms is None else ms / 1000.0
    return tool, seconds


def _hash_ids(value: Any) -> list[Hash] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise RecordError(f"invalid hash_ids: a {type(value).__name__}, not a list")
    for item in value:
        if isinstance(item, bool) or not isinstance(item, (int, str)):
            raise RecordError(f"invalid hash_ids: element {item!r}")
    return value


READER = MooncakeReader()
