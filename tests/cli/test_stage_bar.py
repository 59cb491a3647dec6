"""refit's and validate's bar (ttlctl/cli/stage_bar.py): the runs done and the time stay
whole beside a step's long description on a narrow terminal, which is cut instead."""

from __future__ import annotations

import io

from rich.console import Console

from ttlctl.cli.stage_bar import StageBar

LONG = "continuum (run 2 of 3): live replay of 8 programs (31 calls) on a busy machine"


def _drawn(width: int) -> str:
    shown = StageBar.make("validating")
    shown.stage(LONG)
    shown.runs(2, 6)
    screen = io.StringIO()
    Console(file=screen, width=width, color_system=None).print(
        shown.bar.make_tasks_table(shown.bar.tasks)
    )
    return screen.getvalue()


def test_the_count_and_time_are_never_cut_the_description_is() -> None:
    for width in (60, 80, 100):
        line = _drawn(width).rstrip("\n")
        assert "\n" not in line and len(line) <= width
        assert "validating" in line and " 2/6 " in line and "0:00:00" in line, line
        assert line.endswith("…"), line
    assert "continuum (run 2" in _drawn(100)
    assert LONG in _drawn(200)
