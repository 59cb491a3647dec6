"""Programs inferred from shared prefixes, for Mooncake lines that carry no session.

The heuristic (also in :mod:`ttlctl.ingest.formats.mooncake`'s docstring, the format's
reference): lines in ``timestamp`` order; a program is known by its last request, and its
*key* is that request's ``hash_ids`` less the last (maybe partial) block; a request continues
the program whose key is a non-empty prefix of its ``hash_ids`` and whose last
``input_length`` it exceeds (the longest key wins, then the most recent program); else it
starts a new program ``<stem>-mooncake-<n>``. Lookup is a dict keyed on (key length, key's
last hash id), checked against the full key, so each request costs O(len(hash_ids))
dictionary probes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Hash = int | str


@dataclass
class MooncakeRequest:
    """One line of the trace, parsed: its numbers, ``timestamp`` still in ms."""

    lineno: int
    timestamp_ms: float | None
    input_tokens: int
    output_tokens: int
    hash_ids: list[Hash] | None
    delay_s: float | None
    #: agentic Mooncake's ``tool_events``: the tool that ran before this request, and its
    #: measured duration (s); None when the line names none
    tool_before: str | None = None
    tool_before_s: float | None = None
    #: the line's ``tool_events`` is an empty list: no tool ran before it (a person spoke)
    no_tool_before: bool = False


@dataclass
class InferredProgram:
    """A program of session-less lines, its requests in the order they joined it."""

    pid: str
    requests: list[MooncakeRequest] = field(default_factory=list)
    #: processing order of the last request (larger = more recent)
    last_seq: int = -1


def infer_programs(requests: list[MooncakeRequest], stem: str) -> list[InferredProgram]:
    """Group session-less requests into programs (the heuristic in the module doc)."""
    ordered = sorted(
        requests,
        key=lambda r: (r.timestamp_ms if r.timestamp_ms is not None else 0.0, r.lineno),
    )
    programs: list[InferredProgram] = []
    #: (key length, key's last hash id) -> programs whose last request has that key
    index: dict[tuple[int, Hash], list[InferredProgram]] = {}

    for seq, req in enumerate(ordered):
        target = _match(req, index)
        if target is None:
            target = InferredProgram(pid=f"{stem}-mooncake-{len(programs)}")
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


def _key(req: MooncakeRequest) -> list[Hash]:
    """A program's key: its last request's hash_ids less the last (maybe partial) block."""
    return req.hash_ids[:-1] if req.hash_ids else []


def _match(
    req: MooncakeRequest, index: dict[tuple[int, Hash], list[InferredProgram]]
) -> InferredProgram | None:
    hashes = req.hash_ids
    if not hashes:
        return None
    for length in range(len(hashes), 0, -1):
        candidates = index.get((length, hashes[length - 1]))
        if not candidates:
            continue
        best: InferredProgram | None = None
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
