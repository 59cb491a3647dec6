"""Synthetic agent workloads with the per-program statistics the Continuum paper reports.

The paper's own traces were never published; it reports, per program
(docs/method.md):

=========== ============== ========================= ==========================
workload    turns          tool time per call        tokens per program
=========== ============== ========================= ==========================
swe-bench   10.9 ± 2.1     925 ± 3,550 ms            70k ± 20k
bfcl        6.3 ± 2.3      1,923 ± 2,133 ms          93k ± 69k
=========== ============== ========================= ==========================

:func:`synth` draws programs that reproduce those means and standard deviations
(in expectation; ``tests/replay/test_synth.py`` checks samples of 2,000 programs),
as a canonical trace (``ttlctl.trace.columns.COLUMNS``, one row per LLM call). The
workloads' figures and tool tables, and the distributions solved from them, are
:mod:`replay.synth_workloads`'s; a trace scaled to a small context window is
:mod:`replay.fit_context`'s; the memory a trace takes to build (``ttlctl synth`` refuses a
``--programs`` beyond the machine's) is :mod:`replay.synth_memory`'s.

Distributions, per program (all seeded by ``numpy.random.SeedSequence([seed, crc32(workload)])``):

- **turns** (LLM calls): a discretised normal on the integers ``[2, ⌈mean + 8·sd⌉]``,
  ``P(k) ∝ exp(−(k − μ)²/2σ²)``, with ``μ, σ`` solved so that the *truncated discrete*
  distribution has exactly the paper's mean and sd (10.9 ± 2.1; 6.3 ± 2.3). Every
  program has at least 2 calls.
- **tokens per program** = the last call's prompt (its final context): lognormal with
  the paper's mean and sd (``σ² = ln(1 + cv²)``, ``μ = ln mean − σ²/2``; 70k ± 20k,
  93k ± 69k), clipped to ``[floor, 8 × mean]`` where ``floor`` is what the program's
  first prompt, outputs and a minimal tool result per turn already take (the clip
  touches < 0.1% of programs). Note for BFCL: with sd 69k about 20% of programs end
  above 130k tokens, past Llama-3.1's 131,072-token window; the replay rejects those
  calls unless it truncates (``ReplayConfig.truncate``). A bounded window cannot hold
  the paper's sd (a mean of 93k inside [5k, 128k] allows at most ≈ 55k), so the
  figures are reproduced as reported rather than clipped to one model.
- **first prompt** (system + task): lognormal, median 3,000 tokens (swe-bench: system
  prompt, demonstration and issue text) or 4,000 (bfcl: the API classes' function
  schemas), ``σ = 0.35``, clipped to [1,000, 8,000].
- **output tokens per call**: a few hundred, lognormal with median 250 (swe-bench: a
  thought and one action) or 150 (bfcl: function calls), ``σ = 0.5`` (means ≈ 283 and
  170), clipped to [16, 2,048].
- **context growth**: call ``k + 1``'s prompt = call ``k``'s prompt + its output + the
  result of its tool, so ``reused_tokens`` = previous ``input_tokens + output_tokens``
  exactly (0 on turn 0). The tool results of a program share what is left of its
  final context after the first prompt and the outputs: each result gets a minimum
  of 16 tokens plus a share proportional to its tool's result weight (below) times a
  Gamma(2, ½) draw (mean 1); integer rounding goes to the last result, so the last
  prompt equals the drawn final context exactly.
- **tools**: one per call except the last (``tool`` null there), i.i.d. from a small
  named set; each tool's duration is lognormal with its own mean and cv. All but the
  last tool of each set have fixed (mean, cv); the last one's mean and sd are solved
  so that the mixture's overall mean and sd equal the paper's tool time exactly:

  swe-bench (mixture 925 ± 3,550 ms: sd ≈ 3.8 × mean, a heavy tail from slow test runs)

  ============ ====== ========= ===== ==============
  tool         weight mean (s)  cv    result weight
  ============ ====== ========= ===== ==============
  bash         0.35   0.20      1.0   1.0
  view         0.20   0.08      0.8   2.5
  edit         0.18   0.10      0.8   0.6
  search       0.12   0.50      1.2   1.2
  python       0.10   2.50      1.5   0.8
  pytest       0.05   ≈ 10.2    ≈ 1.1 1.5   (solved)
  ============ ====== ========= ===== ==============

  bfcl (mixture 1,923 ± 2,133 ms; the multi-turn API classes of BFCL v3)

  ================== ====== ========= ===== ==============
  tool               weight mean (s)  cv    result weight
  ================== ====== ========= ===== ==============
  file_system        0.30   1.20      0.8   1.5
  message_api        0.15   1.50      0.9   0.8
  ticket_api         0.10   2.00      1.0   0.8
  trading_bot        0.15   2.50      1.0   1.0
  travel_booking     0.15   2.20      1.0   1.0
  vehicle_control    0.15   ≈ 2.9     ≈ 1.1 0.8   (solved)
  ================== ====== ========= ===== ==============

  Durations are rounded to the millisecond and clipped to [1 ms, 600 s] (the clip
  changes the moments by < 0.1%).
- **times**: ``tool_s`` = the tool's duration, ``gap_s = tool_s`` (the client adds
  nothing), ``llm_s`` null (the replay's cost model times the calls), ``arrival_s``
  = 0.0 on turn 0 and null after: program starts are left to the replay's
  ``--jps``/``--concurrency``.
"""

from __future__ import annotations

import math
import zlib

import numpy as np
import polars as pl

from replay.synth_workloads import solved_tools, spec_of, turns_distribution
from ttlctl.errors import ConfigError
from ttlctl.trace.columns import COLUMNS

#: smallest tool result (tokens) a call adds to the next prompt
MIN_RESULT_TOKENS = 16
#: tool durations: rounded to 1 ms and clipped to this range (s)
TOOL_CLIP_S = (0.001, 600.0)
OUTPUT_CLIP = (16, 2048)
FIRST_PROMPT_CLIP = (1_000, 8_000)
FIRST_PROMPT_SIGMA = 0.35
OUTPUT_SIGMA = 0.5
#: final context clipped above at this multiple of the paper's mean
FINAL_CONTEXT_MAX_X = 8


def program_ids(prefix: str, programs: int) -> list[str]:
    """The ids of ``programs`` programs: ``prefix-000000`` on, zero-padded to six digits or
    to the largest id's (``programs − 1``), so that they sort as they are numbered."""
    width = max(6, len(str(programs - 1)))
    return [f"{prefix}-{i:0{width}d}" for i in range(programs)]


def _lognormal(rng: np.random.Generator, mean: float, cv: float, size: int) -> np.ndarray:
    s2 = math.log1p(cv * cv)
    return rng.lognormal(math.log(mean) - s2 / 2, math.sqrt(s2), size)


def synth(workload: str, programs: int, seed: int) -> pl.DataFrame:
    """``programs`` synthetic agent programs of ``workload`` (``swe-bench`` or ``bfcl``)
    as a canonical trace, sorted by program and turn. Deterministic for a seed."""
    spec = spec_of(workload)
    if programs < 1:
        raise ConfigError(f"--programs must be at least 1, not {programs}")
    if seed < 0:
        raise ConfigError(f"--seed must be non-negative, not {seed}")
    rng = np.random.default_rng(np.random.SeedSequence([seed, zlib.crc32(workload.encode())]))
    tools = solved_tools(spec)

    # per program
    support, probs = turns_distribution(spec.turns_mean, spec.turns_sd)
    turns = rng.choice(support, size=programs, p=probs).astype(np.int64)
    first = np.clip(
        np.rint(rng.lognormal(math.log(spec.first_prompt_median), FIRST_PROMPT_SIGMA, programs)),
        *FIRST_PROMPT_CLIP,
    ).astype(np.int64)
    final = _lognormal(rng, spec.tokens_mean, spec.tokens_sd / spec.tokens_mean, programs)

    # per call
    calls = int(turns.sum())
    prog = np.repeat(np.arange(programs), turns)
    starts = np.cumsum(turns) - turns
    turn = np.arange(calls) - starts[prog]
    last = turn == turns[prog] - 1
    output = np.clip(
        np.rint(rng.lognormal(math.log(spec.output_median), OUTPUT_SIGMA, calls)), *OUTPUT_CLIP
    ).astype(np.int64)
    weights = np.array([t.weight for t in tools])
    tool_idx = rng.choice(len(tools), size=calls, p=weights / weights.sum())
    durations = np.empty(calls)
    for i, t in enumerate(tools):
        mask = tool_idx == i
        assert t.mean_s is not None and t.cv is not None
        durations[mask] = _lognormal(rng, t.mean_s, t.cv, int(mask.sum()))
    durations = np.clip(np.round(durations, 3), *TOOL_CLIP_S)
    share = np.array([t.result_weight for t in tools])[tool_idx] * rng.gamma(2.0, 0.5, calls)
    share[last] = 0.0

    # the final context: at least what the first prompt, outputs and minimal results need
    out_before_last = np.bincount(prog, weights=np.where(last, 0, output), minlength=programs)
    floor = first + out_before_last.astype(np.int64) + (turns - 1) * MIN_RESULT_TOKENS
    final = np.clip(np.rint(final), None, FINAL_CONTEXT_MAX_X * spec.tokens_mean).astype(np.int64)
    final = np.maximum(final, floor)
    extra = final - floor  # tokens the results share beyond their minimum
    share_sum = np.bincount(prog, weights=share, minlength=programs)
    result = np.where(
        last, 0, MIN_RESULT_TOKENS + np.floor(extra[prog] * share / share_sum[prog])
    ).astype(np.int64)
    # rounding: the remainder goes to the program's last tool result (turn n − 2)
    remainder = (
        final
        - first
        - np.bincount(prog, weights=np.where(last, 0, output + result), minlength=programs).astype(
            np.int64
        )
    )
    result[starts + turns - 2] += remainder

    # prompts: first + Σ of the previous calls' output + result, within the program
    step = output + result
    cum = np.cumsum(step)
    before = cum - step - (cum[starts] - step[starts])[prog]
    prompt = first[prog] + before
    reused = np.where(turn == 0, 0, prompt - np.roll(result, 1))

    frame = pl.DataFrame(
        {
            "program_id": pl.Series(program_ids(spec.prefix, programs)).gather(prog),
            "turn": turn,
            "arrival_s": np.where(turn == 0, 0.0, np.nan),
            "input_tokens": prompt,
            "output_tokens": output,
            "reused_tokens": reused,
            "tool": pl.Series([t.name for t in tools]).gather(tool_idx),
            "tool_s": durations,
            "is_last": last,
        }
    )
    return frame.select(
        pl.col("program_id"),
        pl.col("turn"),
        pl.col("arrival_s").fill_nan(None),
        pl.col("input_tokens"),
        pl.col("output_tokens"),
        pl.col("reused_tokens"),
        pl.when(pl.col("is_last")).then(None).otherwise(pl.col("tool")).alias("tool"),
        pl.when(pl.col("is_last")).then(None).otherwise(pl.col("tool_s")).alias("tool_s"),
        pl.when(pl.col("is_last")).then(None).otherwise(pl.col("tool_s")).alias("gap_s"),
        pl.lit(None).alias("llm_s"),
        pl.col("is_last"),
    ).cast(dict(COLUMNS))  # type: ignore[arg-type]
