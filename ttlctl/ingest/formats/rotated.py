"""The parts of a rotated engine log, and the engine record in force across them.

logrotate turns ``engine.jsonl`` into ``engine.jsonl.1``, then ``engine.jsonl.2.gz`` …:
files whose names differ only by a ``.N`` and a ``.gz`` are parts of one log, oldest
first by the highest ``N``, the unsuffixed file last. The plugin writes its engine line
when it starts and atop a file it finds empty, so a part may have none of its own (a
``copytruncate`` rotation, or a server that went on writing after the move): the calls
at its head were logged under the record in force at the end of the log's earlier parts.

What always holds: a call takes the engine record in force where it was logged, in its
file or else in its log's earlier parts, whatever order the files were given in; a call
with no record before it anywhere in its log keeps the name its file gave it.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: a rotated file's name: the log's name, then logrotate's ``.N`` and ``.gz``
_ROTATED = re.compile(r"(.+?)(?:\.(\d+))?(?:\.gz)?")


def log_of(path: Path) -> Path:
    """The log a file is part of: ``path`` less logrotate's suffixes, a number then
    ``.gz`` (``engine.jsonl.2.gz``, ``engine.jsonl.1`` and ``engine.jsonl.gz`` are parts
    of ``engine.jsonl``)."""
    parts = _ROTATED.fullmatch(path.name)
    return path.with_name(parts[1]) if parts else path


def rotations(path: Path) -> int:
    """How many times logrotate has moved the part: its ``N`` (0: the file written now)."""
    parts = _ROTATED.fullmatch(path.name)
    return int(parts[2]) if parts and parts[2] else 0


@dataclass(slots=True)
class Part:
    """One file of a log as read: the calls logged before an engine record of its own
    (``unplaced``, each row holding its file's fallback ``replica``) and the engine record
    in force at its end (None: it has none)."""

    path: Path
    unplaced: list[dict[str, Any]] = field(default_factory=list)
    last: dict[str, Any] | None = None


def carry_over(parts: Sequence[Part]) -> None:
    """Give each part's unplaced calls the engine record in force at the end of its log's
    earlier parts (oldest first): its ``replica``, and the record's ``calls`` count them.
    Parts of one log given in any order are walked alike (ties keep the order given)."""
    logs: dict[Path, list[Part]] = defaultdict(list)
    for part in parts:
        logs[log_of(part.path)].append(part)
    for of_log in logs.values():
        in_force: dict[str, Any] | None = None
        for part in sorted(of_log, key=lambda p: -rotations(p.path)):
            if in_force is not None and part.unplaced:
                for row in part.unplaced:
                    row["replica"] = in_force["replica"]
                in_force["calls"] += len(part.unplaced)
            if part.last is not None:
                in_force = part.last
