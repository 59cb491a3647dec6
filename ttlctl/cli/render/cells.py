"""Cell formats the tables share (numbers, seconds, a dash for nothing) and how a table
is printed (:func:`show`)."""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.segment import Segments
from rich.table import Column, Table
from rich.text import Text


def num(value: Any, digits: int = 2) -> str:
    if value is None:
        return "—"
    if isinstance(value, int):
        return f"{value:,}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


def secs(value: float | None) -> str:
    if value is None:
        return "—"
    if value == 0:
        return "0"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    return f"{value:.2f} s" if value < 100 else f"{value:,.0f} s"


def dash(value: Any, fmt: str) -> str:
    """``value`` in ``fmt``, or a dash when there is none."""
    return "—" if value is None else format(value, fmt)


def show(console: Console, table: Table) -> None:
    """Print ``table`` in the console's width without cutting a number: a number column
    (right-aligned) is at least as wide as its widest cell, so its header may wrap but no
    number does; text wraps between words. Each column gets at least its longest word and
    the width left over goes to the columns that would wrap, in proportion to what they
    lack. A table whose numbers and words cannot fit the console's width is printed wider
    than it rather than with anything cut."""
    lows, highs = [], []
    for column in table.columns:
        low, high = _column_widths(table, column)
        lows.append(low)
        highs.append(high)
    # each column's padding (one each side) and the rules between and around them
    chrome = 2 * len(lows) + (len(lows) + 1 if table.box is not None else 0)
    room = console.width - chrome
    widths = _widths(lows, highs, room)
    for column, width in zip(table.columns, widths, strict=True):
        column.width = width
        column.overflow = "fold"
    needed = sum(widths) + chrome
    if needed <= console.width:
        console.print(table)
        return
    wide = console.options.update(width=needed, max_width=needed)
    console.print(Segments(console.render(table, wide)), crop=False)


def _column_widths(table: Table, column: Column) -> tuple[int, int]:
    """The column's narrowest width (its longest word; a number column: its widest cell;
    a column that must not wrap: its widest line) and its natural one (its widest line)."""
    header = [_plain(column.header)] if table.show_header else []
    cells = [_plain(cell) for cell in column.cells]
    lines = [line for text in header + cells for line in text.splitlines()] or [""]
    high = max(cell_len(line) for line in lines)
    if column.no_wrap:
        return high, high
    words = [word for text in header + cells for word in text.split()] or [""]
    low = max(cell_len(word) for word in words)
    if column.justify == "right":
        low = max([low, *(cell_len(line) for text in cells for line in text.splitlines())])
    return low, max(low, high)


def _widths(lows: list[int], highs: list[int], room: int) -> list[int]:
    """Widths between ``lows`` and ``highs`` that fill ``room`` if they can: what is left
    over the lows goes to each column in proportion to what it lacks of its high."""
    if sum(highs) <= room:
        return highs
    spare = room - sum(lows)
    if spare <= 0:
        return lows
    lack = [high - low for low, high in zip(lows, highs, strict=True)]
    total = sum(lack)
    widths = [low + spare * gap // total for low, gap in zip(lows, lack, strict=True)]
    # the rounding's remainder, one each to the columns that lack the most
    left = room - sum(widths)
    for i in sorted(range(len(widths)), key=lambda i: widths[i] - highs[i])[:left]:
        widths[i] += 1
    return widths


def _plain(cell: object) -> str:
    """A cell's text as printed (a string's markup taken out)."""
    if isinstance(cell, Text):
        return cell.plain
    return Text.from_markup(cell).plain if isinstance(cell, str) else str(cell)
