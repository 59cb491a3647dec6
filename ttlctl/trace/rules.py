"""The canonical trace's rules (docs/trace-format.md), checked on every row ingest writes
and on every trace read back (what they say of a frame: :mod:`ttlctl.trace.verdicts`).

Row rules (a value out of range) and program rules (turns 0..n-1, no duplicate,
arrivals in turn order, ``is_last`` on the last turn) are polars expressions over
a frame grouped by program with turns in order, so the whole check is columnar.
Each row gets the number of the first rule it breaks (0: none); the reason text
is formatted only for the rows that break one. A program with any bad row is
rejected whole: the trace that comes out is always valid, and every rejected row
is accounted for with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from ttlctl.trace.columns import REASON

#: Slack allowed between a recorded gap and the tool time inside it (clock rounding).
GAP_TOLERANCE_S = 1e-3

#: Column: number of the first rule a row breaks (0 none, -1 the reader's own reason).
CODE = "_code"
#: Column ranking a rejected row's reason: 0 the reader's, 1 a value, 2 program order,
#: 3 rejected only because a sibling row is bad.
RANK = "_rank"
#: Column: where the first row of a duplicate's (program, turn) is ("line 3", "a.jsonl,
#: line 3", "row 5"), for its reason: a copy read from two files is found in either.
FIRST_COPY = "_first_copy"

#: Column: a call's tool name where it may be blank, else null (:func:`maybe_blank`).
TOOL_NAME = "_tool_name"

_PROG = pl.col("program_id")
_SAME = (_PROG.shift(1) == _PROG).fill_null(False)
_PREV_TURN = pl.col("_prev_turn")
_PREV_ARRIVAL = pl.col("_prev_arrival")
#: the turn whose arrival ``_PREV_ARRIVAL`` is (the last earlier row with one)
_PREV_ARRIVAL_TURN = pl.col("_prev_arrival_turn")
_LAST = pl.col("_last")


@dataclass(frozen=True, slots=True)
class Rule:
    condition: pl.Expr
    message: pl.Expr
    #: 1 for a bad value, 2 for a broken program order
    rank: int


def maybe_blank(tool: pl.Expr) -> pl.Expr:
    """``tool`` where it is empty or starts with a space, a control character or a character
    beyond ASCII (every blank does: Unicode's spaces are not ASCII), else null. The rule
    strips only these, few of millions: a cheap comparison on every row (about 5 ms on 2M
    calls) where stripping every name cost 25 ms."""
    return pl.when((tool < "!") | (tool >= "\u0080")).then(tool)


def _value_rules() -> list[Rule]:
    def neg(name: str) -> pl.Expr:
        return pl.col(name) < 0

    def msg(text: str) -> pl.Expr:
        return pl.lit(text)

    rules = [
        Rule(_PROG.is_null() | (_PROG == ""), msg("missing program_id"), 1),
        Rule(
            pl.col(TOOL_NAME).str.strip_chars() == "",
            msg('empty tool name: null is no tool, "unknown" a tool whose name is not known'),
            1,
        ),
        Rule(
            pl.col("replica").str.strip_chars() == "",
            msg("empty replica name: null is no replica (a call whose replica is not known)"),
            1,
        ),
        Rule(pl.col("turn").is_null(), msg("missing turn"), 1),
        Rule(neg("turn"), pl.format("negative turn: {}", pl.col("turn")), 1),
        Rule(pl.col("input_tokens").is_null(), msg("missing input_tokens"), 1),
        Rule(pl.col("output_tokens").is_null(), msg("missing output_tokens"), 1),
        Rule(
            neg("input_tokens"), pl.format("negative input_tokens: {}", pl.col("input_tokens")), 1
        ),
        Rule(
            pl.col("input_tokens") == 0,
            msg("input_tokens is 0: an empty prompt, which vLLM refuses"),
            1,
        ),
        Rule(
            neg("output_tokens"),
            pl.format("negative output_tokens: {}", pl.col("output_tokens")),
            1,
        ),
        Rule(
            neg("reused_tokens"),
            pl.format("negative reused_tokens: {}", pl.col("reused_tokens")),
            1,
        ),
        Rule(
            pl.col("reused_tokens") > pl.col("input_tokens"),
            pl.format(
                "reused_tokens exceeds input_tokens: {} > {}",
                pl.col("reused_tokens"),
                pl.col("input_tokens"),
            ),
            1,
        ),
    ]
    rules.append(
        Rule(
            pl.col("prefix_hashes").is_not_null()
            & (pl.col("prefix_block_tokens").fill_null(0) <= 0),
            pl.format(
                "prefix_hashes need a positive prefix_block_tokens: {}",
                pl.col("prefix_block_tokens").cast(pl.String).fill_null("null"),
            ),
            1,
        )
    )
    for name in ("arrival_s", "tool_s", "gap_s", "llm_s"):
        rules.append(
            Rule(~pl.col(name).is_finite(), pl.format(f"non-finite {name}: {{}}", pl.col(name)), 1)
        )
        rules.append(Rule(neg(name), pl.format(f"negative {name}: {{}}", pl.col(name)), 1))
    rules.append(
        Rule(
            pl.col("gap_s") < pl.col("tool_s") - GAP_TOLERANCE_S,
            pl.format("gap_s shorter than tool_s: {} < {}", pl.col("gap_s"), pl.col("tool_s")),
            1,
        )
    )
    return rules


def _program_rules() -> list[Rule]:
    turn = pl.col("turn")
    return [
        Rule(
            _SAME & (turn == _PREV_TURN),
            pl.format(
                "duplicate (program, turn): turn {} appears again (first at {})",
                turn,
                pl.col(FIRST_COPY),
            ),
            2,
        ),
        Rule(
            ~_SAME & (turn != 0),
            pl.format("missing turn: program starts at turn {}", turn),
            2,
        ),
        Rule(
            _SAME & (turn != _PREV_TURN + 1),
            pl.format("missing turn: turn {} follows turn {}", turn, _PREV_TURN),
            2,
        ),
        Rule((turn == 0) & pl.col("arrival_s").is_null(), pl.lit("missing arrival_s on turn 0"), 2),
        Rule(
            _SAME & (pl.col("arrival_s") < _PREV_ARRIVAL),
            pl.format(
                "out-of-order turns: turn {} arrives at {} s, before turn {} at {} s",
                turn,
                pl.col("arrival_s").round(3),
                _PREV_ARRIVAL_TURN,
                _PREV_ARRIVAL.round(3),
            ),
            2,
        ),
        Rule(
            pl.col("is_last") != _LAST,
            pl.format(
                "is_last is {} on turn {}, which is {}the program's last",
                pl.col("is_last"),
                turn,
                pl.when(_LAST).then(pl.lit("")).otherwise(pl.lit("not ")),
            ),
            2,
        ),
        Rule(
            _LAST & pl.col("tool").is_not_null(),
            pl.lit("tool named after the program's last call"),
            2,
        ),
    ]


RULES: tuple[Rule, ...] = (*_value_rules(), *_program_rules())


def _grouped(frame: pl.DataFrame) -> bool:
    """True when each program's rows are contiguous with turns increasing."""
    if frame.height == 0:
        return True
    stats = frame.select(
        runs=(~_SAME).sum(),
        # every program has a run start: the same count as over all rows, on fewer
        programs=_PROG.filter(~_SAME).n_unique(),
        backwards=(_SAME & (pl.col("turn") <= pl.col("turn").shift(1))).any(),
        null_turn=pl.col("turn").is_null().any(),
    ).row(0, named=True)
    return bool(
        stats["runs"] == stats["programs"] and not stats["backwards"] and not stats["null_turn"]
    )


def check(frame: pl.LazyFrame | pl.DataFrame) -> pl.LazyFrame:
    """Group by program (turns in order) and number the first rule each row breaks.

    Adds ``_code`` (0 for a good row) and fills ``is_last`` that a reader left null
    from the turn order. An eager frame already grouped is not re-sorted.
    """
    if isinstance(frame, pl.DataFrame) and _grouped(frame):
        ordered = frame.lazy()
    else:
        ordered = frame.lazy().sort(["program_id", "turn"], nulls_last=True, maintain_order=True)
    if TOOL_NAME not in ordered.collect_schema().names():
        ordered = ordered.with_columns(maybe_blank(pl.col("tool")).alias(TOOL_NAME))
    annotated = ordered.with_columns(
        pl.col("turn").shift(1).alias("_prev_turn"),
        pl.col("arrival_s").forward_fill().shift(1).alias("_prev_arrival"),
        pl.when(pl.col("arrival_s").is_not_null())
        .then(pl.col("turn"))
        .forward_fill()
        .shift(1)
        .alias("_prev_arrival_turn"),
        (_PROG.shift(-1) != _PROG).fill_null(True).alias("_last"),
    )
    code: pl.Expr = pl.lit(0, dtype=pl.Int16)
    for number in range(len(RULES), 0, -1):
        code = pl.when(RULES[number - 1].condition.fill_null(False)).then(number).otherwise(code)
    code = pl.when(pl.col(REASON).is_not_null()).then(-1).otherwise(code)
    return annotated.with_columns(code.cast(pl.Int16).alias(CODE)).with_columns(
        pl.col("is_last").fill_null(_LAST)
    )


def messages(bad: pl.LazyFrame) -> pl.LazyFrame:
    """Reason text and rank for rows that break a rule (a small frame)."""
    text: pl.Expr = pl.col(REASON)
    rank: pl.Expr = pl.lit(0)
    for number, rule in enumerate(RULES, start=1):
        text = pl.when(pl.col(CODE) == number).then(rule.message).otherwise(text)
        rank = pl.when(pl.col(CODE) == number).then(rule.rank).otherwise(rank)
    return bad.with_columns(text.alias(REASON), rank.cast(pl.Int8).alias(RANK))
