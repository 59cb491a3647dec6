"""Requests an engine log holds twice: a line that repeats one read before it, in any of
the files read together.

The plugin writes one line per request, when it finishes; a request is known by its
``request_id`` and its ``arrival_unix_s`` (the engine's clock when it received it). A second
line with both the same (a line written or pasted in again, a rotated part given twice, a
copy of a log under another name, the same log given from two folders) is the same request
again, not another call: the first line read stands (the files are read in the order given,
a folder's in name order). An id alone may repeat: clients that set their own (vLLM's
``X-Request-Id``) reuse them, for a retry too, and those are calls each; they arrive at other
times, on one replica or on two. Two replicas' requests are not logged at the same arrival
under one id (each engine stamps the arrival of what it received), so the files of a fleet
keep each its own calls.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Requests:
    """The requests read so far, in every file, each with where its line is."""

    _where: dict[tuple[str, float], tuple[Path, int]] = field(default_factory=dict)

    def repeat(self, request_id: str, arrival: float, path: Path, lineno: int) -> str | None:
        """Why the line at ``path``:``lineno`` is a duplicate (a reject reason naming the
        line it repeats: its file too when another), or None when its request is new (then
        remembered)."""
        first = self._where.setdefault((request_id, arrival), (path, lineno))
        if first == (path, lineno):
            return None
        return _logged_already(request_id, arrival, path, first)

    def cut_copy(self, request_id: str, arrival: float, path: Path) -> str | None:
        """Why a line that does not parse, but still names ``request_id`` and its
        ``arrival``, is a copy of one read whole (in any file: a log copied while its last
        line was being written), or None when no whole line holds that request."""
        first = self._where.get((request_id, arrival))
        if first is None:
            return None
        return _logged_already(request_id, arrival, path, first) + ", whole"


def _logged_already(request_id: str, arrival: float, path: Path, first: tuple[Path, int]) -> str:
    return (
        f"duplicate request: request_id {json.dumps(request_id)}, arrived at {arrival}, "
        f"is logged already ({logged_at(first, path)})"
    )


def logged_at(first: tuple[Path, int], path: Path) -> str:
    """Where the line a line of ``path`` repeats is: its line, and its file when another."""
    return f"line {first[1]}" if first[0] == path else f"{first[0]}, line {first[1]}"
