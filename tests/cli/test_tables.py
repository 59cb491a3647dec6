"""Tables in the console's width: headers wrap between words, numbers and names are never
cut or folded, and a table that cannot fit is printed whole and wider."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from tests.cli.fleet_result import fleet_result
from ttlctl.cli.render.cells import show
from ttlctl.cli.render.fleet_view import MISS_LABELS, fleet_tables
from ttlctl.cli.render.replay_view import replay_table
from ttlctl.percent import share

HEADERS = (
    "policy", "programs", "calls", "JCT mean (s)", "JCT p50 (s)", "JCT p95 (s)",
    "TTFT mean (s)", "prefix hits", "preempt", "pinned tok·s", "gap closed", "sim calls/s",
)  # fmt: skip
ROWS = (
    ("vllm", "60", "663", "453.43", "475.80", "601.36", "32.059", "3%", "6", "0", "—", "—"),
    ("continuum", "60", "663", "203.10", "199.14", "329.77", "12.568", "68%", "13",
     "20,353,788", "—", "—"),
)  # fmt: skip


def replay_like() -> Table:
    """The replay's table: twelve columns whose headers are wider than their numbers."""
    table = Table(title="replay")
    for col in HEADERS:
        table.add_column(col, justify="left" if col == "policy" else "right")
    for row in ROWS:
        table.add_row(*row)
    return table


def printed(width: int, table: Table) -> list[str]:
    console = Console(width=width, record=True, file=io.StringIO())
    show(console, table)
    return console.export_text().splitlines()


def cells(lines: list[str]) -> list[list[str]]:
    """Each body row's cells (the rows between the header's rule and the bottom one)."""
    body = lines[next(i for i, line in enumerate(lines) if line.startswith("┡")) + 1 :]
    return [
        [c.strip() for c in line.strip("│").split("│")] for line in body if line.startswith("│")
    ]


def test_a_wide_table_fits_a_narrower_console_with_its_headers_wrapped() -> None:
    natural = max(len(line) for line in printed(400, replay_like()))
    assert natural > 140  # the headers on one line need this much
    for width in (119, 120, 140):
        lines = printed(width, replay_like())
        assert max(len(line) for line in lines) <= width, width
        # every row on one line: no name or number folded, none cut
        assert cells(lines) == [list(row) for row in ROWS], width
        # the headers wrapped between words, not inside one
        text = "\n".join(lines)
        assert all(word in text for header in HEADERS for word in header.split()), width


def test_too_narrow_a_console_gets_the_table_whole_and_wider() -> None:
    for width in (60, 118):
        lines = printed(width, replay_like())
        # the narrowest it can be with every word and number whole
        assert max(len(line) for line in lines) == 119, width
        assert cells(lines) == [list(row) for row in ROWS], width
        assert "…" not in "\n".join(lines), width


def test_a_column_that_must_not_wrap_keeps_its_lines() -> None:
    table = Table()
    table.add_column("router field", no_wrap=True)
    table.add_column("from the profile")
    table.add_row("prefill time per token (ms)", "the profile's prefill cost per token at 2k")
    lines = printed(50, table)
    assert any("prefill time per token (ms)" in line for line in lines)
    assert "router field" in "\n".join(lines)
    assert max(len(line) for line in lines) <= 50


def test_rows_stay_on_one_line_in_a_table_that_cannot_fit() -> None:
    """Wider than the console whatever it does: a text cell is not wrapped to save width
    the table cannot save anyway."""
    uses = ("its CDF", "all tools' CDF")
    table = Table()
    for col in (*HEADERS, "policy uses"):
        table.add_column(col, justify="left" if col in ("policy", "policy uses") else "right")
    for row, use in zip(ROWS, uses, strict=True):
        table.add_row(*row, use)
    lines = printed(80, table)
    assert cells(lines) == [[*row, use] for row, use in zip(ROWS, uses, strict=True)]
    # in a console wide enough for its words alone, it wraps instead
    lines = printed(max(len(line) for line in lines) - 2, table)
    assert len(cells(lines)) > len(ROWS)


def test_tables_without_rules_or_padding_fill_the_console_exactly() -> None:
    """The width a table adds to its cells is counted as rich lays it out: a grid, a
    table without edges, one without edge padding."""
    for make in (
        lambda: Table.grid(padding=(0, 1)),
        lambda: Table(show_edge=False),
        lambda: Table(pad_edge=False),
        lambda: Table(box=None),
    ):
        table = make()
        for col in ("name", "what"):
            table.add_column(col)
        table.add_row("alpha", "words " * 30)
        lines = printed(60, table)
        assert max(len(line) for line in lines) == 60


def test_a_share_that_is_not_nothing_never_reads_as_nothing() -> None:
    assert share(None) == "—"
    assert share(0.0) == "0%" and share(1.0) == "100%"
    assert share(0.00055) == "0.1%"  # 2 pins of 3,600: "0%" hid them
    assert share(0.0004) == "<0.1%"
    assert share(0.004) == "0.4%" and share(0.005) in ("0.5%", "1%")
    assert share(0.997) == "99.7%"
    assert share(0.9996) == ">99.9%"
    assert share(0.42) == "42%"
    assert share(float("nan")) == "—" and share(float("inf")) == "—"  # no share: a dash
    # a gap a policy widened: negative, and never "-0%"
    assert share(-0.004) == "-0.4%" and share(-0.0004) == "-<0.1%" and share(-0.42) == "-42%"


def test_the_fleet_table_shows_a_small_waste_of_pins() -> None:
    replica = {
        "llm_calls": 10,
        "engine_busy_s": 5.0,
        "prefix_hit_rate": 0.0004,
        "preemptions": 0,
    }
    result = {
        "policy": "continuum",
        "router": {"name": "pin-aware", "replicas": 2, "settings": {}},
        "load_balance": 1.01,
        "returned_share": 0.998,
        "pins": {"made": 3600},
        "pins_wasted": 2,
        "pins_wasted_share": 2 / 3600,
        "miss_reasons": dict.fromkeys(MISS_LABELS, 0),
        "per_replica": [replica, replica],
    }
    console = Console(record=True, width=200)
    fleet_tables(console, [result])
    text = console.export_text()
    assert "2 (0.1%)" in text and "99.8%" in text and "<0.1%" in text


def test_the_replay_table_shows_prefix_hits_as_the_per_replica_table_does() -> None:
    """A fleet's replay prints the policy's prefix hits above its replicas' own: a rate that
    is not nothing (or not all) reads so in both, not '0%' above '<0.1%'."""
    result = {
        "policy": "vllm", "programs": 6, "llm_calls": 60, "jct_mean_s": 1.0,
        "jct_p50_s": 1.0, "jct_p95_s": 2.0, "ttft_mean_s": 0.1, "preemptions": 0,
        "pinned_token_seconds": 0.0, "gap_closed": None, "sim_calls_per_s": None,
        "rejected_calls": 0,
    }  # fmt: skip
    for rate, shown in ((0.0004, "<0.1%"), (0.998, "99.8%"), (0.42, "42%"), (None, "—")):
        console = Console(record=True, width=200)
        replay_table(console, [{**result, "prefix_hit_rate": rate}], 60)
        (row,) = cells(console.export_text().splitlines())
        assert row[HEADERS.index("prefix hits")] == shown, row


def test_a_program_scheduling_fleet_names_what_the_model_leaves_out() -> None:
    replicas = [{"llm_calls": 4, "engine_busy_s": 2.0} for _ in range(2)]
    settings = {"enable_batch_gain_admission": True}
    result = fleet_result("vllm", replicas, "program-scheduling", settings)
    for name, shown in (("program-scheduling", True), ("cache-aware", False)):
        console = Console(record=True, width=200)
        fleet_tables(console, [{**result, "router": {**result["router"], "name": name}}])
        text = console.export_text()
        assert ("not modelled: the growth reserve, batch-gain admission" in text) is shown
