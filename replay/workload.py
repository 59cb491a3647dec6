"""Agent programs from a canonical trace, as the simulator replays them.

Each call keeps what the trace recorded: prompt and output lengths, how much of
the prompt repeats the previous call's prompt and output, the tool called after
it and the pause that follows (``tool_s`` when measured, else ``gap_s``, else 0).
A pause is what the *client* does; the engine and every policy except the
evaluation-only ``oracle`` never see it.

Program starts: the trace's turn-0 arrivals, or Poisson arrivals at ``jps``
programs per second (seeded), or a closed population of ``concurrency``
programs (a new one starts when one ends).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from ttlctl.trace import io as trace_io


@dataclass(frozen=True, slots=True)
class Call:
    input_tokens: int
    output_tokens: int
    #: prompt tokens that repeat the previous call's prompt + output
    reused_tokens: int
    tool: str | None
    #: the client's pause after this call (seconds); hidden from policies
    pause_s: float


@dataclass(frozen=True, slots=True)
class AgentProgram:
    program_id: str
    #: first arrival, from the trace (re-timed by the replay options)
    start_s: float
    calls: tuple[Call, ...]


@dataclass(frozen=True, slots=True)
class Workload:
    programs: tuple[AgentProgram, ...]

    @property
    def calls(self) -> int:
        return sum(len(p.calls) for p in self.programs)


def from_frame(frame: pl.DataFrame) -> Workload:
    """Programs from canonical rows (sorted by program, turn)."""
    frame = frame.sort(["program_id", "turn"])
    programs: list[AgentProgram] = []
    for (pid,), rows in frame.group_by("program_id", maintain_order=True):
        calls: list[Call] = []
        prev_total = 0
        start = rows["arrival_s"][0]
        for r in rows.iter_rows(named=True):
            reused = r["reused_tokens"]
            if reused is None:
                reused = min(prev_total, r["input_tokens"])
            pause = r["tool_s"] if r["tool_s"] is not None else r["gap_s"]
            calls.append(
                Call(
                    int(r["input_tokens"]),
                    max(1, int(r["output_tokens"])),
                    int(min(reused, r["input_tokens"])),
                    r["tool"],
                    float(pause) if pause is not None else 0.0,
                )
            )
            prev_total = int(r["input_tokens"]) + int(r["output_tokens"])
        programs.append(AgentProgram(str(pid), float(start or 0.0), tuple(calls)))
    programs.sort(key=lambda p: (p.start_s, p.program_id))
    return Workload(tuple(programs))


def load(path: Path) -> Workload:
    return from_frame(trace_io.read(path))


def poisson_starts(n: int, jps: float, seed: int) -> list[float]:
    """Start times of ``n`` programs arriving at ``jps`` per second."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5EED]))
    return list(np.cumsum(rng.exponential(1.0 / jps, n)) - 0.0)


def retimed(workload: Workload, starts: list[float]) -> Workload:
    return Workload(
        tuple(
            AgentProgram(p.program_id, s, p.calls)
            for p, s in zip(workload.programs, starts, strict=True)
        )
    )
