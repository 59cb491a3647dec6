"""A share written as a percent, the one rule every table and page follows.

Whole percents, except where rounding would lie: a share strictly between 0 and 1 that
would round to ``0%`` or ``100%`` keeps one decimal (``0.1%``, ``99.7%``), and one closer
still reads ``<0.1%`` or ``>99.9%``. So a count that is not nothing never reads as nothing
(2 pins wasted of 3,600), nor one short of all as all. A negative share (a gap a policy
widened) is written so too: ``-0.4%`` or ``-<0.1%``, never ``-0%``. No share (``None``, not a
number, or
infinite) is a dash. Nothing is imported, so the command line and the HTML report (which
must not import each other) both write shares with it.
"""

from __future__ import annotations

import math

#: what a table or page shows where there is no share
NONE = "—"


def share(value: float | None) -> str:
    """``value`` (a fraction: 0.42 is 42%) as a percent by the rule above."""
    if value is None or not math.isfinite(value):
        return NONE
    whole = f"{value:.0%}"
    if value < 0 and whole == "-0%":
        tenth = f"{value:.1%}"
        return "-<0.1%" if tenth == "-0.0%" else tenth
    if value > 0 and whole == "0%":
        tenth = f"{value:.1%}"
        return "<0.1%" if tenth == "0.0%" else tenth
    if value < 1 and whole == "100%":
        tenth = f"{value:.1%}"
        return ">99.9%" if tenth == "100.0%" else tenth
    return whole
