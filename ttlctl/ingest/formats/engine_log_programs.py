"""An engine log's calls as programs: turns, reused ids, programs in flight.

A tagged program's calls (from every file, sorted by arrival) are cut after each call
tagged ``is_last``: each run is a program, the first named by the id, later ones
``<id>#2`` … (an id used again). Untagged calls are one-call programs
``request:<request_id>``. Each run's calls are numbered and their gaps filled; a tagged run
whose last call is not tagged ``is_last`` was in flight when the log was read and ends
there. :mod:`ttlctl.ingest.formats.engine_log` documents the rules.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import pairwise
from typing import Any

#: the program id of an untagged request: ``request:<request_id>``
UNTAGGED = "request:"
#: the ``_sort`` (arrival) of a bad record whose arrival could not be read
UNPLACED = float("inf")


def as_programs(
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
    part is one run of the program (its id used again after it ended).

    A bad record whose arrival is unknown (sorted last) joins the last run, before the call
    that ends it: a bad record rejects its program whole, and its place must not make a
    good call look out of order (``is_last`` on a call that is no longer the last).
    """
    runs: list[list[dict[str, Any]]] = [[]]
    unplaced = [row for row in calls if row["_sort"] == UNPLACED]
    for row in calls[: len(calls) - len(unplaced)]:
        if runs[-1] and runs[-1][-1].get("is_last") is True:
            runs.append([])
        runs[-1].append(row)
    last = runs[-1]
    at = len(last) - 1 if last and last[-1].get("is_last") is True else len(last)
    last[at:at] = unplaced
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

    A program with a bad record is ended too, so that its good calls break no rule (only
    its bad record is a reason), but not counted: validation rejects it whole.
    """
    last = calls[-1]
    if last.get("is_last") is True:
        return 0
    last["is_last"] = True
    last["tool"] = None  # the tool it waits on, and the pause after it, are unknown
    last.pop("gap_s", None)
    bad = any("_reason" in row for row in calls)
    return 0 if bad or program.startswith(UNTAGGED) else 1
