"""Requests an engine log holds twice: a line that repeats one read before it.

The plugin writes one line per request, when it finishes; in one engine's log (its file and
its rotated parts: :func:`ttlctl.ingest.formats.rotated.log_of`) a request is known by its
``request_id`` and its ``arrival_unix_s`` (the engine's clock when it received it). A second
line with both the same (a line written or pasted in again, a part given twice) is the same
request again, not another call. An id alone may repeat: clients that set their own (vLLM's
``X-Request-Id``) reuse them, for a retry too, and those are calls each; they arrive at other
times. The logs of two replicas are two engines: a request each served is a call each.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Requests:
    """The requests read so far, by log, each with where its line is."""

    _where: dict[tuple[str, str, float], tuple[Path, int]] = field(default_factory=dict)

    def repeat(
        self, log: str, request_id: str, arrival: float, path: Path, lineno: int
    ) -> str | None:
        """Why the line at ``path``:``lineno`` of ``log`` is a duplicate (a reject reason),
        or None when its request is new to that log (then remembered)."""
        first = self._where.setdefault((log, request_id, arrival), (path, lineno))
        if first == (path, lineno):
            return None
        where = f"line {first[1]}" if first[0] == path else f"{first[0]}, line {first[1]}"
        return (
            f"duplicate request: request_id {json.dumps(request_id)}, arrived at {arrival}, "
            f"is logged already ({where})"
        )
