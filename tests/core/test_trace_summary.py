"""The trace summary ``ttlctl ingest`` prints: a null ``reused_tokens`` (the reader does not
know it; the canonical default applies) is counted apart, not summed as 0."""

from __future__ import annotations

import polars as pl
import pytest
from rich.console import Console

from replay.workload import from_frame
from ttlctl.cli.render.trace_view import trace_summary
from ttlctl.trace.columns import COLUMNS, COUNT_MAX, EXTRA_COLUMNS, TURN_MAX, conform
from ttlctl.trace.summary import summarize


def _trace(reused: list[int | None]) -> pl.LazyFrame:
    n = len(reused)
    frame = pl.LazyFrame(
        {
            "program_id": ["p"] * n,
            "turn": list(range(n)),
            "input_tokens": [100 * (i + 1) for i in range(n)],
            "output_tokens": [10] * n,
            "reused_tokens": reused,
            "tool": ["bash"] * (n - 1) + [None],
        },
        schema_overrides={"reused_tokens": pl.Int64},
    )
    return conform(frame, keep_source=False)


def test_unknown_reuse_is_counted_apart_from_known_reuse() -> None:
    tokens = summarize(_trace([0, 90, None, 250]))["tokens"]
    assert tokens["reused"] == 340
    assert tokens["reused_unknown_calls"] == 1
    assert tokens["input"] == 1000 and tokens["output"] == 40


def test_a_trace_whose_reader_records_no_reuse_says_so() -> None:
    tokens = summarize(_trace([None, None, None]))["tokens"]
    assert tokens["reused"] == 0
    assert tokens["reused_unknown_calls"] == 3


def _line(trace: pl.LazyFrame) -> str:
    console = Console(record=True, width=400)
    trace_summary(console, summarize(trace))
    return next(x for x in console.export_text().splitlines() if x.startswith("tokens:"))


def test_unrecorded_reuse_is_the_replays_figure_not_zero() -> None:
    """Regression: a mini-swe-agent ingest printed `reused 0 (not recorded for 1,501 calls:
    previous input + output assumed)`, which reads as no reuse. The line gives the reuse the
    replay assumes for those calls (replay.workload's own figure), and no 0."""
    trace = _trace([None, None, None])
    tokens = summarize(trace)["tokens"]
    replayed = from_frame(trace.collect()).programs[0].calls
    assert tokens["reused_assumed"] == sum(c.reused_tokens for c in replayed) == 110 + 210
    line = _line(trace)
    assert "reused 0" not in line
    assert line.endswith(
        "reused: 320 assumed for 3 calls that record none (previous input + output)"
    )
    mixed = _trace([0, 90, None, 250])
    assert summarize(mixed)["tokens"]["reused_assumed"] == 210  # min(200 + 10, 300)
    assert _line(mixed).endswith(
        "reused 340 recorded, 210 assumed for 1 call that records none (previous input + output)"
    )
    assert _line(_trace([0, 90])).endswith("reused 90")


def test_the_assumed_reuse_is_capped_at_the_call_s_own_prompt() -> None:
    """docs/trace-format.md: a null reused_tokens is "the previous call's input + output,
    capped at this call's input" (a prompt shorter than the history: a reset), in the
    summary and in the replay alike."""
    trace = conform(
        pl.LazyFrame(
            {
                "program_id": ["p", "p"],
                "turn": [0, 1],
                "input_tokens": [500, 120],
                "output_tokens": [40, 10],
                "reused_tokens": [None, None],
                "tool": ["bash", None],
            },
            schema_overrides={"reused_tokens": pl.Int64},
        ),
        keep_source=False,
    )
    replayed = from_frame(trace.collect()).programs[0].calls
    assert [c.reused_tokens for c in replayed] == [0, 120]
    assert summarize(trace)["tokens"]["reused_assumed"] == 120


def test_a_tools_pause_is_its_tool_s_else_its_gap() -> None:
    """What `ttlctl fit` fits: a call's pause is its tool_s, else its gap_s; a tool with
    neither has no pause, and is not among the tools with one."""
    frame = pl.LazyFrame(
        {
            "program_id": ["p"] * 4,
            "turn": [0, 1, 2, 3],
            "input_tokens": [100, 200, 300, 400],
            "output_tokens": [10] * 4,
            "tool": ["bash", "grep", "sed", None],
            "tool_s": [1.0, None, None, None],
            "gap_s": [2.0, 3.0, None, None],
        }
    )
    tools = summarize(conform(frame, keep_source=False))["tools"]
    assert tools["distinct"] == tools["calls_with_tool"] == 3
    assert tools["calls_with_pause"] == tools["distinct_with_pause"] == 2


def _huge(
    inputs: list[int], outputs: list[int], reused: list[int | None] | None = None, programs: int = 1
) -> pl.LazyFrame:
    """``programs`` programs, each with these calls."""
    n = len(inputs)
    frame = pl.LazyFrame(
        {
            "program_id": [f"p{i}" for i in range(programs) for _ in range(n)],
            "turn": list(range(n)) * programs,
            "input_tokens": inputs * programs,
            "output_tokens": outputs * programs,
            "reused_tokens": (reused or [None] * n) * programs,
            "tool": [None] * n * programs,
        },
        schema_overrides={"reused_tokens": pl.Int64},
    )
    return conform(frame, keep_source=False)


TOP = 2**63 - 1  # the largest count a column holds (ingest takes it)


def test_token_totals_past_64_bits_are_exact() -> None:
    """The totals are the sums of the counts, input, output and recorded reuse alike, not a
    64-bit sum wrapped negative."""
    trace = _huge([TOP, TOP], [TOP, 5], reused=[0, TOP], programs=2)
    tokens = summarize(trace)["tokens"]
    assert tokens["input"] == 4 * TOP
    assert tokens["output"] == 2 * (TOP + 5)
    assert tokens["reused"] == 2 * TOP
    assert "tokens: input 36,893,488,147,419,103,228" in _line(trace)


@pytest.mark.parametrize(
    ("inputs", "outputs"),
    [
        ([TOP - 10, 1_000], [100, 5]),  # the previous input alone passes this one
        ([5, 1_000], [TOP, 0]),  # the previous output does: input + output past 64 bits
    ],
)
def test_the_assumed_reuse_past_64_bits_is_the_calls_input(
    inputs: list[int], outputs: list[int]
) -> None:
    """The previous call's input + output past 64 bits is still at least this call's input:
    the assumed reuse is the input (a wrapped sum made it negative), in the replay and in
    the summary alike, and the summary's total of it is exact."""
    trace = _huge(inputs, outputs)
    replayed = from_frame(trace.collect()).programs[0].calls
    assert [c.reused_tokens for c in replayed] == [0, 1_000]
    assert summarize(trace)["tokens"]["reused_assumed"] == 1_000
    both = _huge([TOP - 1, TOP], [TOP, 0], programs=2)  # each assumes TOP for its second call
    assert summarize(both)["tokens"]["reused_assumed"] == 2 * TOP


def test_the_largest_counts_are_the_columns_types_largest() -> None:
    """Ingest refuses a count past ``COUNT_MAX`` and a turn or block size past ``TURN_MAX``,
    and the default reuse saturates at ``COUNT_MAX``: each is what its columns hold."""
    counts = ("input_tokens", "output_tokens", "reused_tokens")
    for name, most in [*((c, COUNT_MAX) for c in counts), ("turn", TURN_MAX)]:
        dtype = {**COLUMNS, **EXTRA_COLUMNS}[name]
        assert pl.Series([most], dtype=dtype).item() == most
        with pytest.raises(TypeError):  # past the type: polars will not build it
            pl.Series([most + 1], dtype=dtype)
    assert EXTRA_COLUMNS["prefix_block_tokens"] == COLUMNS["turn"]
