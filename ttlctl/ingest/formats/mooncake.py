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
- ``tool``: ``"unknown"`` on every call another call of its program follows
  (the pause is an unknown tool or user); null on the last call.
- ``tool_s``, ``llm_s``: null (not recorded).
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
program.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ttlctl.ingest.fields import RecordError, duration, number, tokens
from ttlctl.ingest.jsontext import first_object_line, iter_jsonl
from ttlctl.ingest.rawfile import logical
from ttlctl.ingest.reader import Parsed, frame_from_rows
from ttlctl.ingest.rejects import RejectSink

BLOCK_SIZE = 512

Hash = int | str


@dataclass
class _Request:
    lineno: int
    timestamp_ms: float | None
    input_tokens: int
    output_tokens: int
    hash_ids: list[Hash] | None
    delay_s: float | None


@dataclass
class _Program:
    pid: str
    requests: list[_Request] = field(default_factory=list)
    #: processing order of the last request (larger = more recent)
    last_seq: int = -1


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
        sessions: dict[str, list[tuple[_Request | None, dict[str, Any]]]] = {}
        loose: list[_Request] = []

        for lineno, obj in iter_jsonl(path, sink):
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
        groups: list[Sequence[_Request | None]] = [
            [req for req, _ in items] for items in sessions.values()
        ]
        count = _programs_per_hash(groups + [p.requests for p in inferred])
        for session, items in sessions.items():
            rows.extend(_session_rows(f"{stem}-{session}", items, count))
        for program in inferred:
            rows.extend(_program_rows(program, count))

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


def _parse(obj: dict[str, Any], lineno: int, *, need_timestamp: bool) -> _Request:
    ts = number(obj.get("timestamp"), "timestamp", required=need_timestamp)
    if ts is not None and ts < 0:
        raise RecordError(f"negative timestamp: {ts!r}")
    inp = tokens(obj.get("input_length"), "input_length")
    out = tokens(obj.get("output_length"), "output_length")
    assert inp is not None and out is not None
    delay = duration(obj.get("delay"), "delay")
    if delay is None:
        delay = duration(obj.get("delay_ms"), "delay_ms")
    return _Request(
        lineno=lineno,
        timestamp_ms=ts,
        input_tokens=inp,
        output_tokens=out,
        hash_ids=_hash_ids(obj.get("hash_ids")),
        delay_s=None if delay is None else delay / 1000.0,
    )


def _hash_ids(value: Any) -> list[Hash] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise RecordError(f"invalid hash_ids: a {type(value).__name__}, not a list")
    for item in value:
        if isinstance(item, bool) or not isinstance(item, (int, str)):
            raise RecordError(f"invalid hash_ids: element {item!r}")
    return value


# ---------------------------------------------------------------- programs


def infer_programs(requests: list[_Request], stem: str) -> list[_Program]:
    """Group session-less requests into programs (the heuristic in the module doc)."""
    ordered = sorted(
        requests,
        key=lambda r: (r.timestamp_ms if r.timestamp_ms is not None else 0.0, r.lineno),
    )
    programs: list[_Program] = []
    #: (key length, key's last hash id) -> programs whose last request has that key
    index: dict[tuple[int, Hash], list[_Program]] = {}

    for seq, req in enumerate(ordered):
        target = _match(req, index)
        if target is None:
            target = _Program(pid=f"{stem}-mooncake-{len(programs)}")
            programs.append(target)
        else:
            old = _key(target.requests[-1])
            if old:
                index[(len(old), old[-1])].remove(target)
        target.requests.append(req)
        target.last_seq = seq
        new = _key(req)
        if new:
            index.setdefault((len(new), new[-1]), []).append(target)
    return programs


def _key(req: _Request) -> list[Hash]:
    """A program's key: its last request's hash_ids less the last (maybe partial) block."""
    return req.hash_ids[:-1] if req.hash_ids else []


def _match(req: _Request, index: dict[tuple[int, Hash], list[_Program]]) -> _Program | None:
    hashes = req.hash_ids
    if not hashes:
        return None
    for length in range(len(hashes), 0, -1):
        candidates = index.get((length, hashes[length - 1]))
        if not candidates:
            continue
        best: _Program | None = None
        for program in candidates:
            last = program.requests[-1]
            if req.input_tokens <= last.input_tokens:
                continue
            if _key(last) != hashes[:length]:
                continue
            if best is None or program.last_seq > best.last_seq:
                best = program
        if best is not None:
            return best
    return None


# ---------------------------------------------------------------- rows


def _shared_blocks(a: list[Hash] | None, b: list[Hash] | None) -> int | None:
    if a is None or b is None:
        return None
    shared = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        shared += 1
    return shared


def _arrival(req: _Request) -> float | None:
    return None if req.timestamp_ms is None else req.timestamp_ms / 1000.0


def _programs_per_hash(programs: Sequence[Sequence[_Request | None]]) -> dict[Hash, int]:
    """How many programs carry each hash id (the blocks are chained: a hash id is one
    prefix, wherever it occurs)."""
    count: dict[Hash, int] = {}
    for requests in programs:
        seen: set[Hash] = set()
        for req in requests:
            if req is not None and req.hash_ids:
                seen.update(req.hash_ids)
        for h in seen:
            count[h] = count.get(h, 0) + 1
    return count


def _int64(h: Hash) -> int:
    if isinstance(h, int) and -(1 << 63) <= h < (1 << 63):
        return h
    digest = hashlib.blake2b(str(h).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def _shared_prefix(row: dict[str, Any], req: _Request, count: dict[Hash, int]) -> None:
    """The leading full blocks other programs carry too (module docstring)."""
    if not req.hash_ids:
        return
    n = 0
    for h in req.hash_ids[: req.input_tokens // BLOCK_SIZE]:
        if count.get(h, 0) < 2:
            break
        n += 1
    if n:
        row["prefix_hashes"] = [_int64(h) for h in req.hash_ids[:n]]
        row["prefix_block_tokens"] = BLOCK_SIZE


def _base_row(
    pid: str, turn: int, req: _Request, prev: _Request | None, count: dict[Hash, int]
) -> dict[str, Any]:
    if prev is None:
        reused: int | None = 0
    else:
        shared = _shared_blocks(prev.hash_ids, req.hash_ids)
        reused = None if shared is None else min(shared * BLOCK_SIZE, req.input_tokens)
    row = {
        "program_id": pid,
        "turn": turn,
        "arrival_s": _arrival(req),
        "input_tokens": req.input_tokens,
        "output_tokens": req.output_tokens,
        "reused_tokens": reused,
        "_record": f"line {req.lineno}",
    }
    _shared_prefix(row, req, count)
    return row


def _link(row: dict[str, Any], this: _Request, nxt: _Request) -> None:
    """Fill tool and gap_s of ``row`` (for ``this``), which ``nxt`` follows."""
    row["tool"] = "unknown"
    if nxt.delay_s is not None:
        row["gap_s"] = nxt.delay_s
        return
    start, end = _arrival(this), _arrival(nxt)
    if start is not None and end is not None:
        # An upper bound (includes this call's LLM time); validation reports a
        # negative one as out-of-order turns.
        row["gap_s"] = max(0.0, end - start)


def _program_rows(program: _Program, count: dict[Hash, int]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    reqs = program.requests
    for turn, req in enumerate(reqs):
        row = _base_row(program.pid, turn, req, reqs[turn - 1] if turn else None, count)
        if turn + 1 < len(reqs):
            _link(row, req, reqs[turn + 1])
        rows.append(row)
    return rows


def _session_rows(
    pid: str, items: list[tuple[_Request | None, dict[str, Any]]], count: dict[Hash, int]
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for turn, (req, extra) in enumerate(items):
        if req is None:
            rows.append({"program_id": pid, "turn": turn, **extra})
            continue
        prev = items[turn - 1][0] if turn else None
        row = _base_row(pid, turn, req, prev, count)
        if turn and prev is None:
            row["reused_tokens"] = None
        if turn == 0 and row["arrival_s"] is None:
            row["arrival_s"] = 0.0
        nxt = items[turn + 1][0] if turn + 1 < len(items) else None
        if nxt is not None:
            _link(row, req, nxt)
        elif turn + 1 < len(items):
            row["tool"] = "unknown"
        rows.append(row)
    return rows


READER = MooncakeReader()
