"""A count with its noun, singular or plural as English wants: "1 program", "2 programs".

The one place user-facing text pluralises a noun after a number (summaries, titles, the
lines a command prints), instead of an ``if`` at each. JSON keys are not words: never here.
Nothing of ttlctl is imported, so every layer may use it.
"""

from __future__ import annotations

from collections.abc import Sequence


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` with thousands separated, then ``noun``: singular for exactly 1, else
    ``plural`` (default: ``noun`` + "s"; give it for "policy" → "policies")."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def listed(words: Sequence[str]) -> str:
    """``words`` as English lists them: "a", "a and b", "a, b and c" ("" for none)."""
    if len(words) < 2:
        return "".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]
