"""A workload built in code (``AgentProgram``, ``Call``, ``from_frame`` on a frame that never
went through the trace reader) is held to the trace's rules when it is made: a bad value is
one ``WorkloadError`` (a ``ValueError`` and a ``TtlctlError``) naming the program, the turn
and the value. Regressions: a NaN pause or start made ``simulate`` loop forever, an infinite
one ended the replay at infinity, a negative pause sent a call before its predecessor
finished, a negative prompt crashed the KV pool (``hit -1 for p``) deep in a step, a float
prompt crashed the decoders; ``from_frame`` raised a bare ``cannot convert float NaN to
integer`` and raised a negative output to 1 without a word."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import pytest

from profiles.cost import ConstantCostModel
from replay.policies.simple import VLLM
from replay.sim import ReplayConfig, simulate
from replay.workload import (
    AgentProgram,
    Call,
    Workload,
    WorkloadError,
    from_frame,
    poisson_starts,
)
from ttlctl.errors import TtlctlError

NAN, INF = float("nan"), float("inf")


def program(start: Any = 0.0, **second: Any) -> AgentProgram:
    """Program ``p``: a good turn 0, then turn 1 with the values given (else good ones)."""
    values = {"inp": 200, "out": 10, "reused": 110, "pause": 0.0, **second}
    turn1 = Call(values["inp"], values["out"], values["reused"], None, values["pause"])
    return AgentProgram("p", start, (Call(100, 10, 0, "t", 0.5), turn1))


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ({"pause": NAN}, "non-finite pause_s: nan"),
        ({"pause": INF}, "non-finite pause_s: inf"),
        ({"pause": -5.0}, "negative pause_s: -5.0"),
        ({"pause": "1"}, "pause_s is '1', not a number"),
        ({"inp": -5, "reused": 0}, "negative input_tokens: -5"),
        ({"inp": 0, "reused": 0}, "input_tokens is 0: an empty prompt, which vLLM refuses"),
        ({"inp": NAN}, "input_tokens is nan, not a whole number"),
        ({"inp": 200.5}, "input_tokens is 200.5, not a whole number"),
        ({"out": -1}, "negative output_tokens: -1"),
        ({"out": NAN}, "output_tokens is nan, not a whole number"),
        ({"reused": -4}, "negative reused_tokens: -4"),
        ({"reused": 201}, "reused_tokens exceeds input_tokens: 201 > 200"),
        ({"reused": True}, "reused_tokens is True, not a whole number"),
    ],
)
def test_a_bad_call_is_refused_naming_program_turn_and_value(
    values: dict[str, Any], problem: str
) -> None:
    with pytest.raises(WorkloadError) as info:
        program(**values)
    assert str(info.value) == f"program 'p', turn 1: {problem}"
    # the project's error for bad input (one line, exit 2 at the CLI) and a ValueError
    assert isinstance(info.value, TtlctlError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("start", "problem"),
    [
        (NAN, "non-finite start_s: nan"),
        (INF, "non-finite start_s: inf"),
        (-3.0, "negative start_s: -3.0"),
        (None, "start_s is None, not a number"),
    ],
)
def test_a_bad_start_is_refused_naming_the_program(start: Any, problem: str) -> None:
    with pytest.raises(WorkloadError) as info:
        program(start)
    assert str(info.value) == f"program 'p': {problem}"


def test_values_the_trace_allows_are_kept() -> None:
    """An output of 0 tokens, a pause or start of 0 given as an int, numpy's integers and
    floats (a frame's values taken one by one), a reuse equal to the prompt: all valid."""
    made = AgentProgram(
        "p",
        0,
        (
            Call(100, 0, 0, "t", 0),
            Call(np.int64(200), np.int64(10), np.int64(200), None, np.float64(1.5)),
        ),
    )
    assert made.calls[1].pause_s == 1.5


def test_a_nan_pause_is_refused_before_the_replay_instead_of_hanging_it() -> None:
    """Regression: ``simulate`` looped forever on this workload (a NaN event time)."""
    with pytest.raises(WorkloadError, match="turn 0: non-finite pause_s: nan"):
        Workload(
            (AgentProgram("p", 0.0, (Call(100, 10, 0, "t", NAN), Call(100, 10, 0, None, 0.0))),)
        )
    good = Workload((program(),))
    outcome = simulate(good, VLLM(), ConstantCostModel(), ReplayConfig(check=True))
    assert [(c.program, c.turn) for c in outcome.calls] == [("p", 0), ("p", 1)]


def frame(**second: Any) -> pl.DataFrame:
    """Canonical columns for program ``p``, two turns; turn 1's values as given."""
    columns: dict[str, list[Any]] = {
        "program_id": ["p", "p"],
        "turn": [0, 1],
        "arrival_s": [0.0, 1.0],
        "input_tokens": [100, 200],
        "output_tokens": [10, 10],
        "reused_tokens": [0, 110],
        "tool": ["t", None],
        "tool_s": [0.5, None],
        "gap_s": [1.0, None],
    }
    for name, value in second.items():
        columns[name] = [columns[name][0], value]
    return pl.DataFrame(columns, strict=False)


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ({"input_tokens": NAN}, "input_tokens is nan, not a whole number"),
        ({"input_tokens": 200.5}, "input_tokens is 200.5, not a whole number"),
        ({"output_tokens": None}, "missing output_tokens"),
        ({"output_tokens": -3}, "negative output_tokens: -3"),  # was raised to 1, unsaid
        ({"reused_tokens": NAN}, "reused_tokens is nan, not a whole number"),
        ({"reused_tokens": 300}, "reused_tokens exceeds input_tokens: 300 > 200"),
        ({"tool_s": NAN}, "non-finite pause_s: nan"),
        ({"gap_s": -1.0}, "negative pause_s: -1.0"),
    ],
)
def test_from_frame_refuses_a_frame_built_in_code_naming_program_and_turn(
    values: dict[str, Any], problem: str
) -> None:
    with pytest.raises(WorkloadError) as info:
        from_frame(frame(**values))
    assert str(info.value) == f"program 'p', turn 1: {problem}"


def test_from_frame_refuses_a_nan_arrival_and_keeps_whole_floats() -> None:
    bad = frame().with_columns(pl.Series("arrival_s", [NAN, 1.0]))
    with pytest.raises(WorkloadError) as info:
        from_frame(bad)
    assert str(info.value) == "program 'p': non-finite start_s: nan"
    # a Float64 column of whole counts reads as the ints; an output of 0 as 1 (as ever)
    floats = frame(output_tokens=0).with_columns(pl.col("input_tokens").cast(pl.Float64))
    (made,) = from_frame(floats).programs
    assert [(c.input_tokens, c.output_tokens) for c in made.calls] == [(100, 10), (200, 1)]
    assert all(type(c.input_tokens) is int for c in made.calls)


def test_a_program_id_given_twice_is_refused() -> None:
    """Two programs of one id would share the simulator's pins, streams and records."""
    with pytest.raises(WorkloadError, match="program 'p' appears twice"):
        Workload((program(), program(start=1.0)))
    assert len(Workload((program(),)).programs) == 1


def test_from_frame_takes_a_frame_of_the_required_columns_alone() -> None:
    """The trace's optional columns are optional in code too (a frame without
    ``reused_tokens`` raised polars' ColumnNotFoundError); a required one missing is named."""
    frame = pl.DataFrame(
        {"program_id": ["p", "p"], "turn": [0, 1], "input_tokens": [100, 150],
         "output_tokens": [10, 5]}
    )  # fmt: skip
    (prog,) = from_frame(frame).programs
    assert [c.input_tokens for c in prog.calls] == [100, 150]
    assert prog.calls[1].reused_tokens == 110  # the format's default: previous input + output
    assert prog.start_s == 0.0 and prog.calls[0].pause_s == 0.0
    with pytest.raises(WorkloadError, match="no input_tokens column"):
        from_frame(frame.drop("input_tokens"))


def test_a_pause_is_the_tool_time_else_the_gap_else_nothing() -> None:
    """replay/workload.py: ``tool_s`` when measured, else ``gap_s``, else 0."""

    def first(f: pl.DataFrame) -> float:
        return from_frame(f).programs[0].calls[0].pause_s

    assert first(frame()) == 0.5  # tool_s 0.5 beside a gap of 1.0
    untimed = frame().with_columns(pl.Series("tool_s", [None, None], dtype=pl.Float64))
    assert first(untimed) == 1.0
    assert first(untimed.with_columns(pl.Series("gap_s", [None, None], dtype=pl.Float64))) == 0.0


def test_the_true_pauses_end_before_each_programs_last_call() -> None:
    """What the oracle reads: a pause after every call but the last, which has none."""
    assert Workload((program(pause=0.0),)).pauses() == {("p", 0): 0.5}


def test_poisson_starts_follow_the_seed() -> None:
    starts = poisson_starts(5, 2.0, 0)
    assert starts == poisson_starts(5, 2.0, 0)
    assert starts != poisson_starts(5, 2.0, 1)
    assert starts == sorted(starts) and starts[0] > 0


def test_from_frame_orders_the_programs_by_their_start() -> None:
    """The programs by start, then id (validate and the live replay take the first N)."""
    late = frame().with_columns(pl.lit("a").alias("program_id"), pl.Series("arrival_s", [5.0, 6.0]))
    both = pl.concat([late, frame().with_columns(pl.lit("b").alias("program_id"))])
    assert [p.program_id for p in from_frame(both).programs] == ["b", "a"]


@pytest.mark.parametrize(("block", "shown"), [(None, "null"), (0, "0")])
def test_shared_hashes_without_a_block_size_are_refused_as_the_trace_rules_refuse_them(
    block: int | None, shown: str
) -> None:
    """A frame built in code is held to the trace's rules: hashes of a shared prefix need
    its block size (they were dropped without a word, the calls replayed sharing nothing)."""
    shared = frame().with_columns(
        pl.Series("prefix_hashes", [[1, 2], None], dtype=pl.List(pl.Int64)),
        pl.Series("prefix_block_tokens", [block, None], dtype=pl.Int32),
    )
    with pytest.raises(WorkloadError) as info:
        from_frame(shared)
    assert str(info.value) == (
        f"program 'p', turn 0: prefix_hashes need a positive prefix_block_tokens: {shown}"
    )
    (made,) = from_frame(
        shared.with_columns(pl.lit(16, pl.Int32).alias("prefix_block_tokens"))
    ).programs
    assert made.calls[0].prefix is not None and made.calls[1].prefix is None
