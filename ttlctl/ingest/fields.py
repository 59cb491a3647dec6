"""A record's fields coerced to the values of a row: numbers, whole numbers, durations,
token counts, epoch seconds, labels (roles, event types), tool names.

Each helper raises :class:`RecordError` (its message the reject reason: what is wrong with
which field) when the value cannot be one; a reader catches it and rejects the record.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from datetime import UTC, datetime
from typing import Any

from ttlctl.trace.columns import COUNT_MAX


class RecordError(ValueError):
    """A record that cannot become a row; the message is the reject reason."""


def number(value: Any, field: str, *, required: bool = True) -> float | None:
    """A finite float from a number or numeric string; RecordError otherwise."""
    if value is None or (isinstance(value, str) and value.strip() == ""):
        if required:
            raise RecordError(f"missing {field}")
        return None
    if isinstance(value, bool):
        raise RecordError(f"non-numeric {field}: {value!r}")
    try:
        out = float(value)
    except OverflowError:  # a whole number past a float's range (JSON has no bound)
        raise RecordError(f"out-of-range {field}: {_short(value)}") from None
    except (TypeError, ValueError):
        raise RecordError(f"non-numeric {field}: {_short(value)}") from None
    if not math.isfinite(out):
        raise RecordError(f"non-finite {field}: {_short(value)}")
    return out


def integer(value: Any, field: str, *, required: bool = True, most: int = COUNT_MAX) -> int | None:
    """A whole number from an int, integral float or numeric string, from ``-most - 1`` to
    ``most`` (what the column it fills holds: a count's by default)."""
    if isinstance(value, int) and not isinstance(value, bool):
        whole = value  # as it is: through a float, 2**63 - 1 would read as 2**63
    else:
        out = number(value, field, required=required)
        if out is None:
            return None
        if out != int(out):
            raise RecordError(f"non-integer {field}: {_short(value)}")
        whole = int(out)
    if whole > most:
        raise RecordError(f"out-of-range {field}: {_short(value)} (at most {most:,})")
    if whole < -most - 1:
        raise RecordError(f"out-of-range {field}: {_short(value)} (at least {-most - 1:,})")
    return whole


def duration(value: Any, field: str, *, required: bool = False) -> float | None:
    """A non-negative number of seconds."""
    out = number(value, field, required=required)
    if out is not None and out < 0:
        raise RecordError(f"negative {field}: {_short(value)}")
    return out


def tokens(value: Any, field: str, *, required: bool = True) -> int | None:
    out = integer(value, field, required=required)
    if out is not None and out < 0:
        raise RecordError(f"negative {field}: {_short(value)}")
    return out


def epoch(value: Any, field: str) -> float:
    """Epoch seconds from an ISO 8601 string (naive: UTC) or a number."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:  # a whole number past a float's range
            raise RecordError(f"out-of-range {field}: {_short(value)}") from None
    if not isinstance(value, str):
        raise RecordError(f"bad {field}: {value!r}"[:120])
    try:
        stamp = datetime.fromisoformat(value.strip())
    except ValueError:
        raise RecordError(f"bad {field}: {value!r}"[:120]) from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.timestamp()


def label(value: Any, field: str, known: Collection[str]) -> str:
    """One of a format's ``known`` values for ``field`` (a message's role, an event's type):
    RecordError when it is missing or blank, not a string, or another value, so that a
    record a reader selects by it is never passed over unread (a misspelt ``"asistant"``
    would drop the call it holds)."""
    if value is None or (isinstance(value, str) and value.strip() == ""):
        raise RecordError(f"missing {field}")
    if not isinstance(value, str):
        raise RecordError(f"non-string {field}: {_short(value)}")
    if value not in known:
        raise RecordError(f"unknown {field}: {_short(value)} (expected {', '.join(known)})")
    return value


def tool_name(value: Any) -> str | None:
    """A tool's name as a log gives it: the text without the blanks around it; None when it
    is not text or is blank. A blank name names no tool: where one ran, the reader writes
    ``"unknown"``, as for no name at all (a canonical trace refuses a blank ``tool``)."""
    if not isinstance(value, str):
        return None
    return value.strip() or None


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"
