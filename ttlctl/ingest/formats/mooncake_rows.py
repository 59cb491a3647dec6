"""A Mooncake program's requests as canonical rows.

Per request: its arrival (``timestamp`` ms → s), tokens, the tokens reused from the
program's previous request (shared leading ``hash_ids`` × 512), the leading blocks other
programs carry too (``prefix_hashes``), and, when another request of its program follows,
``tool`` (the next request's ``tool_events``, none where they list none, else "unknown"),
``tool_s`` (their measured duration) and ``gap_s`` (the next turn's ``delay``, else the
arrivals' difference: an upper bound). :mod:`ttlctl.ingest.formats.mooncake` documents each column.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from ttlctl.ingest.formats.mooncake_programs import Hash, InferredProgram, MooncakeRequest

BLOCK_SIZE = 512


def _shared_blocks(a: list[Hash] | None, b: list[Hash] | None) -> int | None:
    if a is None or b is None:
        return None
    shared = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        shared += 1
    return shared


def _arrival(req: MooncakeRequest) -> float | None:
    return None if req.timestamp_ms is None else req.timestamp_ms / 1000.0


def programs_per_hash(programs: Sequence[Sequence[MooncakeRequest | None]]) -> dict[Hash, int]:
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


def _shared_prefix(row: dict[str, Any], req: MooncakeRequest, count: dict[Hash, int]) -> None:
    """The leading full blocks other programs carry too (the mooncake module's docstring)."""
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
    pid: str, turn: int, req: MooncakeRequest, prev: MooncakeRequest | None, count: dict[Hash, int]
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


def _link(row: dict[str, Any], this: MooncakeRequest, nxt: MooncakeRequest) -> None:
    """Fill tool, tool_s and gap_s of ``row`` (for ``this``), which ``nxt`` follows: the
    tool ``nxt``'s ``tool_events`` name as run before it, none where they list none, else
    "unknown"."""
    row["tool"] = None if nxt.no_tool_before else nxt.tool_before or "unknown"
    if nxt.tool_before_s is not None:
        row["tool_s"] = nxt.tool_before_s
    if nxt.delay_s is not None:
        row["gap_s"] = nxt.delay_s
        return
    start, end = _arrival(this), _arrival(nxt)
    if start is not None and end is not None:
        # An upper bound (includes this call's LLM time); validation reports a
        # negative one as out-of-order turns.
        row["gap_s"] = max(0.0, end - start)


def program_rows(program: InferredProgram, count: dict[Hash, int]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    reqs = program.requests
    for turn, req in enumerate(reqs):
        row = _base_row(program.pid, turn, req, reqs[turn - 1] if turn else None, count)
        if turn + 1 < len(reqs):
            _link(row, req, reqs[turn + 1])
        rows.append(row)
    return rows


def session_rows(
    pid: str, items: list[tuple[MooncakeRequest | None, dict[str, Any]]], count: dict[Hash, int]
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
