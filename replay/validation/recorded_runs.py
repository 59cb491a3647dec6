"""A fleet validation's live runs read back from its document, for
:mod:`~replay.validation.resimulate`: :func:`recorded_runs` gives every run in the order
validate ran them, each replica's arrivals file read again and checked against the calls
per replica the document recorded for that run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from replay.validation.error import ValidateError
from replay.validation.fleet_rows import LiveRun
from replay.validation.recorded import Recorded, RecordedFleet, damaged
from ttlctl.server import arrivals


def _runs_of(by: Any, policy: str, router: str, repeats: int, what: str) -> list[Any]:
    """The recorded ``what`` (``live`` or ``fleets``) documents of (policy, router): one
    per repeat."""
    got = by[policy][router]
    runs = got if repeats > 1 else [got]
    if not isinstance(runs, list) or len(runs) != repeats:
        raise ValueError(f"{what}.{policy}.{router}: not {repeats} runs")
    return runs


def recorded_runs(rec: Recorded, fleet: RecordedFleet) -> list[LiveRun]:
    """Every live run a fleet validation recorded (``fleet``: its own settings), in the
    order validate ran them (run k of every policy and router before run k + 1 of any),
    each replica's arrivals file read again. Refused (:class:`ValidateError` naming the
    file): a missing arrivals file, or one whose calls per replica are not those the
    document recorded for its run (overwritten since)."""
    doc, path = rec.doc, rec.path
    try:
        lives = {
            (n, r): _runs_of(doc["live"], n, r, rec.repeats, "live")
            for n in rec.policies
            for r in fleet.routers
        }
        fleets = {
            (n, r): _runs_of(doc["fleets"], n, r, rec.repeats, "fleets")
            for n in rec.policies
            for r in fleet.routers
        }
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise damaged(path, doc, exc) from None
    runs = []
    for rep in range(rec.repeats):
        for name in rec.policies:
            for router in fleet.routers:
                ran = fleets[(name, router)][rep]
                order = _arrivals(path, ran, f"{name} behind {router}, run {rep + 1}")
                live = lives[(name, router)][rep]
                recorded = _recorded_row(doc, name, router, rep, rec.repeats)
                seen = arrivals.per_replica(order)
                # a replica no call reached: 0 in the document (since 2026-12-05), absent
                # from the arrivals
                said = recorded.get("calls_per_replica") if recorded is not None else None
                if recorded is not None and not _same_counts(said, seen):
                    raise ValidateError(
                        f"{path}: {name} behind {router}, run {rep + 1}: its replicas' "
                        f"arrivals files give calls per replica {seen}, the document "
                        f"recorded {recorded.get('calls_per_replica')} (files overwritten "
                        "by a later run?)"
                    )
                runs.append(LiveRun(rep, name, router, live, order, ran))
    return runs


def _arrivals(path: Path, fleet: Mapping[str, Any], which: str) -> dict[str, list[str]]:
    """{session: [replica of each call]} from a recorded fleet's arrivals files, each one
    there (a replica's file holds its warm-up calls at least)."""
    try:
        files = {name: Path(r["arrivals"]) for name, r in fleet["replicas"].items()}
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValidateError(f"{path}: {which}: no arrivals file recorded ({exc})") from None
    for name, file in files.items():
        if not file.is_file():
            raise ValidateError(
                f"{path}: {which}: replica {name}'s arrivals file {file} is missing"
                + ("" if file.is_absolute() else " (a relative path is read from here)")
            )
    try:
        return arrivals.read(files)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValidateError(f"{path}: {which}: an arrivals file is damaged ({exc})") from None


def _recorded_row(
    doc: Mapping[str, Any], policy: str, router: str, rep: int, repeats: int
) -> Mapping[str, Any] | None:
    """The row the document recorded for one run (None: none kept)."""
    row = ((doc.get("rows") or {}).get(policy) or {}).get(router)
    if not isinstance(row, Mapping):
        return None
    if repeats == 1:
        return row
    runs = row.get("runs")
    return runs[rep] if isinstance(runs, Sequence) and len(runs) == repeats else None


def _same_counts(recorded: Any, seen: dict[str, int]) -> bool:
    """Whether the document's calls per replica are the arrivals' (a replica at 0 in
    either is one no call reached)."""
    if not isinstance(recorded, dict):
        return False
    return {k: v for k, v in recorded.items() if v} == {k: v for k, v in seen.items() if v}
