"""Engine logs for refit tests, written from a canonical trace in the plugin's format
(schema ``ttlctl.engine-log/1``, the keys the reader's docstring lists)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from replay.synth import synth
from ttlctl.ingest.formats.engine_log import SCHEMA

#: the log's clock starts here (epoch seconds)
T0 = 1_800_000_000.0
#: seconds between programs' first calls
STAGGER_S = 5.0


def llm_s(output_tokens: int) -> float:
    """A call's time in the engine: a fixed part and 20 ms per output token."""
    return 0.1 + 0.02 * output_tokens


def swe_trace(programs: int, seed: int = 0) -> pl.DataFrame:
    """SWE-like programs (``ttlctl synth``), started ``STAGGER_S`` apart."""
    frame = synth("swe-bench", programs, seed)
    start = (pl.col("program_id").rank("dense").cast(pl.Float64) - 1) * STAGGER_S
    return frame.with_columns(arrival_s=pl.when(pl.col("turn") == 0).then(start).otherwise(None))


def engine_lines(frame: pl.DataFrame) -> list[dict[str, Any]]:
    """One engine-log record per call, in the order the engine finishes them: each call
    arrives at the previous call's finish plus its tool time (``tool_s``)."""
    lines: list[dict[str, Any]] = []
    ordered = frame.sort("program_id", "turn")
    for (pid,), rows in ordered.group_by("program_id", maintain_order=True):
        t = T0 + float(rows["arrival_s"][0])
        for r in rows.iter_rows(named=True):
            finish = t + llm_s(r["output_tokens"])
            lines.append(
                {
                    "schema": SCHEMA,
                    "request_id": f"{pid}-{r['turn']}",
                    "program_id": pid,
                    "tool": r["tool"],
                    "is_last": bool(r["is_last"]),
                    "arrival_unix_s": t,
                    "first_token_unix_s": t + 0.05,
                    "finish_unix_s": finish,
                    "prompt_tokens": r["input_tokens"],
                    "output_tokens": r["output_tokens"],
                    "cached_tokens": None,
                    "finish_reason": "stop",
                    "ttl_s": 0.0,
                }
            )
            t = finish + (r["tool_s"] or 0.0)
    lines.sort(key=lambda line: (line["finish_unix_s"], line["request_id"]))
    return lines


def write_log(path: Path, lines: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def cut(lines: list[dict[str, Any]], at_unix_s: float) -> list[dict[str, Any]]:
    """The log as read at ``at_unix_s``: the requests finished by then."""
    return [line for line in lines if line["finish_unix_s"] <= at_unix_s]
