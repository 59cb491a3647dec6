"""Canonical trace → Mooncake JSONL (and Dynamo's agentic Mooncake), so the same workload
runs in vLLM's, AIPerf's, SGLang's or Dynamo's replayers.

One line per call, in program and turn order:

- ``timestamp`` (ms) when the trace has the call's arrival, ``input_length``,
  ``output_length``, ``session_id`` (the program) and, from turn 1 on, ``delay`` (ms of
  pause before it: the previous call's ``tool_s``, else ``gap_s``);
- ``hash_ids``: the prompt's blocks of ``block_size`` tokens (Mooncake's 512 by
  default), chained per program: a call keeps the ids of the previous call's stream for
  the blocks its ``reused_tokens`` cover and takes fresh ids for the rest, so a
  replayer sees the same prefix sharing the trace recorded. A call with a shared prefix
  (``prefix_hashes``) starts with one id per shared block of ``block_size`` tokens, the
  same in every program (:mod:`ttlctl.trace.prefix` keys), and keeps its program's ids
  after them only when the previous call had the same shared blocks;
- agentic Mooncake adds ``request_id``, ``wait_for`` (the previous call),
  ``tool_wait_ms`` and ``tool_events`` (``tool_class``, ``duration_ms``) of the tool
  that ran before the call.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from ttlctl.errors import ConfigError
from ttlctl.jsonio import write_atomic
from ttlctl.trace.prefix import SharedKey, shared_keys

FORMATS = ("mooncake", "agentic-mooncake")


def check(fmt: str, block_size: int) -> None:
    """:class:`ConfigError`, naming the flag, unless ``fmt`` and ``block_size`` can be
    written (checked before the trace is read)."""
    if fmt not in FORMATS:
        raise ConfigError(f"--to: unknown export format {fmt!r}; choose {' or '.join(FORMATS)}")
    if block_size <= 0:
        raise ConfigError("--block-size must be positive")


def rows(trace: pl.DataFrame, fmt: str, block_size: int = 512) -> list[dict[str, Any]]:
    check(fmt, block_size)
    out: list[dict[str, Any]] = []
    next_id = 0
    shared_ids: dict[SharedKey, int] = {}
    frame = trace.sort(["program_id", "turn"])
    for (program,), calls in frame.group_by("program_id", maintain_order=True):
        stream: list[int] = []  # block ids of the previous call's prompt + output
        prev: dict[str, Any] | None = None
        prev_keys: tuple[SharedKey, ...] = ()
        for call in calls.iter_rows(named=True):
            prompt = int(call["input_tokens"])
            reused = call["reused_tokens"]
            if reused is None:
                reused = (
                    0
                    if prev is None
                    else min(prompt, int(prev["input_tokens"]) + int(prev["output_tokens"]))
                )
            keep = min(int(reused), prompt) // block_size
            keys = _keys(call, block_size, prompt)
            if keys or prev_keys:
                blocks = []
                for key in keys:
                    if key not in shared_ids:
                        shared_ids[key] = next_id
                        next_id += 1
                    blocks.append(shared_ids[key])
                if keys == prev_keys:
                    blocks += stream[len(blocks) : keep]
                prev_keys = keys
            else:
                blocks = stream[:keep]
            need = -(-prompt // block_size)
            while len(blocks) < need:
                blocks.append(next_id)
                next_id += 1
            line: dict[str, Any] = {}
            if call["arrival_s"] is not None:
                line["timestamp"] = round(call["arrival_s"] * 1000)
            line.update(
                session_id=str(program),
                input_length=prompt,
                output_length=int(call["output_tokens"]),
                hash_ids=blocks,
            )
            pause = None
            if prev is not None:
                pause = prev["tool_s"] if prev["tool_s"] is not None else prev["gap_s"]
                if pause is not None:
                    line["delay"] = round(pause * 1000)
            if fmt == "agentic-mooncake":
                line["request_id"] = f"{program}:{call['turn']}"
                if prev is not None:
                    line["wait_for"] = f"{program}:{prev['turn']}"
                    if pause is not None:
                        line["tool_wait_ms"] = round(pause * 1000)
                    if prev["tool"] is not None:
                        event: dict[str, Any] = {"tool_class": prev["tool"]}
                        if prev["tool_s"] is not None:
                            event["duration_ms"] = round(prev["tool_s"] * 1000)
                        line["tool_events"] = [event]
                    else:  # no tool ran (a person spoke): said, so it reads back as none
                        line["tool_events"] = []
            out.append(line)
            # the next call's prefix: this prompt's full blocks (a partial last block
            # changes once the output fills it), then the output's
            total = prompt + int(call["output_tokens"])
            stream = blocks[: prompt // block_size]
            while len(stream) < total // block_size:
                stream.append(next_id)
                next_id += 1
            prev = call
    return out


def _keys(call: dict[str, Any], block_size: int, prompt: int) -> tuple[SharedKey, ...]:
    """The call's shared blocks inside its prompt."""
    hashes, tokens = call.get("prefix_hashes"), call.get("prefix_block_tokens")
    if not hashes or not tokens:
        return ()
    return shared_keys(hashes, int(tokens), block_size)[: prompt // block_size]


def write(lines: list[dict[str, Any]], path: Path) -> None:
    """Write the JSONL atomically: the file is whole or absent, never half-written."""
    write_atomic("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), path)
