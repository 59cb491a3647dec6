"""Agent programs from a canonical trace, as the simulator replays them.

Each call keeps what the trace recorded: prompt and output lengths, how much of
the prompt repeats the previous call's prompt and output, the tool called after
it and the pause that follows (``tool_s`` when measured, else ``gap_s``, else 0).
A pause is what the *client* does; the engine and every policy except the
evaluation-only ``oracle`` never see it.

Program starts: the trace's turn-0 arrivals, or Poisson arrivals at ``jps``
programs per second (seeded), or a closed population of ``concurrency``
programs (a new one starts when one ends).

Shared prefixes. A call may begin with blocks other programs share (a product's system
prompt and tool definitions, a Mooncake request's ``hash_ids`` seen in another
program): :attr:`Call.prefix`, from the trace's ``prefix_hashes`` and
``prefix_block_tokens``. :meth:`Call.block_keys` gives the call's prompt as the
engine's blocks, one key per full block, which is what the backends' prefix caches and
the fleet routers compare:

- first the shared keys: engine block ``k`` ends at token ``e = (k + 1) * block_size``;
  its key is ``((h, b), e)`` with ``h`` the trace hash of the block holding token
  ``e − 1`` and ``b`` the trace's block size. The hashes are chained within one block size
  (equal hashes: equal tokens up to the end of that block), so equal keys mean equal tokens
  from the start of the prompt up to ``e``; the same hash at another block size (two
  sources ingested together, say Mooncake's 512 and Weka's 64) is another prefix, never
  a hit. The trace block size need not divide or be divided by the engine's
  (``prefix_block_tokens`` 512 for Mooncake, 64 for Weka, engine blocks of 16: 32 or 4
  keys per hash). Only the full engine blocks inside both the hashed prefix and the
  prompt have keys;
- then the program's own blocks, ``(program_id, k)`` up to the prompt's last full block.
  Within a program they repeat as long as the call reuses its predecessor's stream; a
  call that rewrote its history (``reused_tokens`` below the earlier stream) gets the
  same keys for different tokens, which a router's overlap estimate then overrates.
  Both backends hit a program's own blocks only while its shared keys stay the same
  (the own blocks follow the shared ones in vLLM's hash chain).

A workload built in code (:class:`AgentProgram`, :class:`Call`, :func:`from_frame` on a frame
that never went through :mod:`ttlctl.trace.io`) is held to the values the trace's rules
allow (``ttlctl/trace/rules.py``): each :class:`AgentProgram` checks its start and its calls
once, when it is made, and a bad one is a :class:`WorkloadError` naming the program and the
turn. Unchecked, a NaN pause or start made the replay loop forever, a negative pause sent a
call before its predecessor finished, an infinite one ended the replay at infinity, a
negative prompt crashed the KV pool deep inside a step. The replay's own loop checks nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from numbers import Integral, Real
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from ttlctl.errors import TtlctlError
from ttlctl.trace import io as trace_io
from ttlctl.trace.columns import REQUIRED, all_columns
from ttlctl.trace.prefix import shared_keys
from ttlctl.trace.reuse import reuse

#: a block of a prompt: ``((trace hash, trace block size), end token)`` for a shared block,
#: ``(program_id, index)`` for the program's own (see the module docstring)
BlockKey = tuple[tuple[int, int] | str, int]


class WorkloadError(TtlctlError, ValueError):
    """A program's start or call out of the trace's range (a workload built in code): one
    line naming the program and the turn, and the value."""


@dataclass(frozen=True, slots=True)
class SharedPrefix:
    """The leading prompt blocks a call shares with other programs: chained hashes of
    ``block_tokens`` tokens each (the trace's ``prefix_hashes``, ``prefix_block_tokens``)."""

    hashes: tuple[int, ...]
    block_tokens: int

    def keys(self, block_size: int, prompt_tokens: int) -> tuple[BlockKey, ...]:
        """The shared engine blocks of a prompt of ``prompt_tokens`` tokens (see the
        module docstring)."""
        return _shared_keys(self, block_size, prompt_tokens)


def _shared_keys(prefix: SharedPrefix, block_size: int, prompt_tokens: int) -> tuple[BlockKey, ...]:
    tokens = min(len(prefix.hashes) * prefix.block_tokens, prompt_tokens)
    return _first_keys(prefix, block_size, tokens // block_size)


@lru_cache(maxsize=4096)
def _first_keys(prefix: SharedPrefix, block_size: int, n: int) -> tuple[BlockKey, ...]:
    """The first ``n`` keys, one tuple for every call that has them (the pools compare
    keys by identity first)."""
    return _all_keys(prefix, block_size)[:n]


@lru_cache(maxsize=1024)
def _all_keys(prefix: SharedPrefix, block_size: int) -> tuple[BlockKey, ...]:
    return shared_keys(prefix.hashes, prefix.block_tokens, block_size)


@dataclass(frozen=True, slots=True)
class Call:
    input_tokens: int
    output_tokens: int
    #: prompt tokens that repeat the previous call's prompt + output
    reused_tokens: int
    tool: str | None
    #: the client's pause after this call (seconds); hidden from policies
    pause_s: float
    #: leading prompt blocks shared with other programs (None: none known)
    prefix: SharedPrefix | None = None

    def shared_keys(self, block_size: int) -> tuple[BlockKey, ...]:
        """The keys of the call's shared prompt blocks at the engine's ``block_size``."""
        if self.prefix is None:
            return ()
        return self.prefix.keys(block_size, self.input_tokens)

    def block_keys(self, program_id: str, block_size: int) -> tuple[BlockKey, ...]:
        """The call's prompt as the engine's full blocks: the shared keys first, then the
        program's own ``(program_id, index)`` (module docstring). What a router scoring
        prefix overlap compares with what a replica holds."""
        shared = self.shared_keys(block_size)
        own = range(len(shared), self.input_tokens // block_size)
        return shared + tuple((program_id, k) for k in own)


@dataclass(frozen=True, slots=True)
class AgentProgram:
    """One program: its first arrival and its calls in turn order. Always holds what the
    trace's rules hold (checked here, once): ``start_s`` finite and >= 0, and each call's
    ``input_tokens`` >= 1, ``output_tokens`` >= 0, ``reused_tokens`` from 0 to
    ``input_tokens`` (whole numbers) and ``pause_s`` finite and >= 0. So the simulator, the
    fleet and the live driver never meet a NaN or a negative value in their loops."""

    program_id: str
    #: first arrival, from the trace (re-timed by the replay options)
    start_s: float
    calls: tuple[Call, ...]

    def __post_init__(self) -> None:
        if not _seconds(self.start_s):
            raise WorkloadError(
                f"program {self.program_id!r}: {_bad_seconds('start_s', self.start_s)}"
            )
        for turn, call in enumerate(self.calls):
            problem = _call_problem(call)
            if problem is not None:
                raise WorkloadError(f"program {self.program_id!r}, turn {turn}: {problem}")


@dataclass(frozen=True, slots=True)
class Workload:
    """Programs, each id once (the simulator and the fleet key their books by program id:
    two programs of one id would share pins, streams and records without a word)."""

    programs: tuple[AgentProgram, ...]

    def __post_init__(self) -> None:
        ids = {p.program_id for p in self.programs}
        if len(ids) != len(self.programs):
            seen: set[str] = set()
            for p in self.programs:
                if p.program_id in seen:
                    raise WorkloadError(
                        f"program {p.program_id!r} appears twice: a workload's program ids "
                        "must be unique"
                    )
                seen.add(p.program_id)

    @property
    def calls(self) -> int:
        return sum(len(p.calls) for p in self.programs)

    def pauses(self) -> dict[tuple[str, int], float]:
        """Each call's true pause before its program's next call, by (program, turn): what
        the evaluation-only oracle reads. A program's last call has none (the oracle tells
        the last call by this, not by the client's ``is_last`` tag: ``--client-tags``)."""
        return {
            (p.program_id, i): c.pause_s for p in self.programs for i, c in enumerate(p.calls[:-1])
        }


def _seconds(value: object) -> bool:
    """``value`` a finite number of seconds >= 0 (NaN fails the comparison)."""
    return (
        isinstance(value, Real) and not isinstance(value, bool) and 0.0 <= float(value) < math.inf
    )


def _bad_seconds(name: str, value: object) -> str:
    """Why ``value`` is no ``name`` (:func:`_seconds` said it is not), as the trace's rules
    say it."""
    if not isinstance(value, Real) or isinstance(value, bool):
        return f"{name} is {value!r}, not a number"
    return (
        f"non-finite {name}: {value}" if not math.isfinite(value) else f"negative {name}: {value}"
    )


def _call_problem(call: Call) -> str | None:
    """Why ``call`` breaks the trace's rules, in their words (None: it does not). The
    common case, plain ints and a float, is one comparison chain; the rest is spelled out."""
    inp, out, reused, pause = (
        call.input_tokens,
        call.output_tokens,
        call.reused_tokens,
        call.pause_s,
    )
    if (
        type(inp) is int
        and type(out) is int
        and type(reused) is int
        and type(pause) is float
        and 0 <= reused <= inp
        and inp > 0
        and out >= 0
        and 0.0 <= pause < math.inf
    ):
        return None
    for name, value in (("input_tokens", inp), ("output_tokens", out), ("reused_tokens", reused)):
        if not isinstance(value, Integral) or isinstance(value, bool):
            return f"{name} is {value!r}, not a whole number"
        if value < 0:
            return f"negative {name}: {value}"
    if inp == 0:
        return "input_tokens is 0: an empty prompt, which vLLM refuses"
    if reused > inp:
        return f"reused_tokens exceeds input_tokens: {reused} > {inp}"
    return None if _seconds(pause) else _bad_seconds("pause_s", pause)


def from_frame(frame: pl.DataFrame) -> Workload:
    """Programs from canonical rows (sorted by program, turn). A value out of the trace's
    range (a frame built in code: one read from a file was checked on read) is a
    :class:`WorkloadError` naming the program and the turn."""
    frame = _with_optional_columns(frame)
    # a null reused_tokens filled with the format's default (ttlctl.trace.reuse)
    frame = frame.sort(["program_id", "turn"]).with_columns(reuse())
    programs: list[AgentProgram] = []
    has_prefix = "prefix_hashes" in frame.columns and frame["prefix_hashes"].null_count() < len(
        frame
    )
    interned: dict[tuple[tuple[int, ...], int], SharedPrefix] = {}
    for (pid,), rows in frame.group_by("program_id", maintain_order=True):
        calls: list[Call] = []
        start = rows["arrival_s"][0]
        for r in rows.iter_rows(named=True):
            try:
                calls.append(_call(r, _prefix(r, interned) if has_prefix else None))
            except WorkloadError as e:
                raise WorkloadError(f"program {str(pid)!r}, turn {r['turn']}: {e}") from None
        programs.append(AgentProgram(str(pid), float(start or 0.0), tuple(calls)))
    programs.sort(key=lambda p: (p.start_s, p.program_id))
    return Workload(tuple(programs))


def _with_optional_columns(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with the trace's optional columns it lacks as nulls, as the trace reader
    conforms a file (a frame built in code may leave them out); a required one missing is a
    :class:`WorkloadError` naming it. Present columns are left as they are (their values are
    checked as the programs are made)."""
    missing = [name for name in REQUIRED if name not in frame.columns]
    if missing:
        raise WorkloadError(f"the frame has no {', '.join(missing)} column (a trace requires it)")
    absent = [(n, t) for n, t in all_columns().items() if n not in frame.columns]
    if not absent:
        return frame
    return frame.with_columns(pl.lit(None, dtype=t).alias(n) for n, t in absent)


def _call(row: dict[str, Any], prefix: SharedPrefix | None) -> Call:
    """A frame's row as a call: the pause is ``tool_s``, else ``gap_s``, else 0; an output
    of 0 tokens is taken as 1 (replay generates at least one). Out-of-range values are left
    for :class:`AgentProgram` to refuse (a negative output is not raised to 1)."""
    output = _count(row, "output_tokens")
    pause = row["tool_s"] if row["tool_s"] is not None else row["gap_s"]
    return Call(
        _count(row, "input_tokens"),
        max(1, output) if output >= 0 else output,
        _count(row, "reused_tokens"),
        row["tool"],
        float(pause) if pause is not None else 0.0,
        prefix,
    )


def _count(row: dict[str, Any], name: str) -> int:
    """A token count from a row: an int, or a whole float (a Float64 column built in code);
    :class:`WorkloadError` for a null, NaN or fraction (``int()`` would fail without naming
    the row, or truncate)."""
    value = row[name]
    if type(value) is int:
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise WorkloadError(
        f"missing {name}" if value is None else f"{name} is {value!r}, not a whole number"
    )


def _prefix(
    row: dict[str, Any], interned: dict[tuple[tuple[int, ...], int], SharedPrefix]
) -> SharedPrefix | None:
    """The row's shared prefix, one object for equal ones (their keys are cached);
    :class:`WorkloadError` for hashes without a positive block size, as the trace's rules
    say it."""
    hashes, block = row["prefix_hashes"], row["prefix_block_tokens"]
    if hashes is not None and (block is None or block <= 0):
        shown = "null" if block is None else block
        raise WorkloadError(f"prefix_hashes need a positive prefix_block_tokens: {shown}")
    if not hashes:
        return None
    key = (tuple(hashes), int(block))
    prefix = interned.get(key)
    if prefix is None:
        prefix = interned[key] = SharedPrefix(*key)
    return prefix


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
