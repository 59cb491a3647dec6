"""Fit's table of pauses by tool: the all-tools row first, then the tools with the most
pauses first (the ones a policy leans on most)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from tests.cli.test_tables import cells
from ttlctl.cli.render.fit_view import fit_table


def test_the_tools_come_after_all_tools_most_pauses_first(small_inputs: dict[str, Path]) -> None:
    fit = json.loads(small_inputs["fit"].read_text())
    console = Console(file=io.StringIO(), width=200, record=True)
    fit_table(console, fit)
    rows = cells(console.export_text().splitlines())
    assert rows[0][0] == "(all tools)"
    tools = rows[1:]
    assert sorted(row[0] for row in tools) == sorted(fit["tools"]) and len(tools) > 1
    counts = [int(row[1].replace(",", "")) for row in tools]
    assert counts == sorted(counts, reverse=True) and counts[0] > counts[-1], rows


def test_the_resamples_line_only_when_fewer_were_drawn_than_asked(
    small_inputs: dict[str, Path],
) -> None:
    fit = json.loads(small_inputs["fit"].read_text())
    asked = fit["config"]["bootstrap"]
    fit["eta"].update(value=0.9, ci_low=0.8, ci_high=1.0)
    for drawn, said in ((asked, False), (asked - 1, True)):
        fit["eta"]["bootstrap"] = drawn
        console = Console(file=io.StringIO(), width=200, record=True)
        fit_table(console, fit)
        line = f"η's interval from {drawn:,} resamples, not the {asked:,} asked"
        assert (line in console.export_text()) is said, drawn
