"""Seeded perturbations of a workload's arrival timing: a simulated mean over timings.

Live, the moment each call reaches the router moves from run to run by milliseconds (the
engines' steps, the client's threads), and where a router places by load or by what is
cached, which replica a program lands on follows those moments; the calls' contention on
each replica does too. On the saved swe8 fleet runs (2 replicas, 8 programs), one
deterministic simulation put ``cache_aware``'s programs so that 77% of prompt tokens hit
while six live runs hit 51–75%, and simulations whose pauses moved by at most 0.5% gave
mean JCTs from 7.4 to 13.3 s. One simulation is one draw from that spread, while the live
side of ``validate --repeats K`` is a mean over K runs: comparing the two judges the
draw, not the simulator.

:func:`perturbed` is one seeded draw: each program starts later by up to
:attr:`Timings.start_s`, each pause is scaled by a factor within ``1 ± pause_rel``. The
fleet validation simulates :attr:`Timings.draws` of them (``validate --timing-draws``,
:data:`DRAWS` unless told) and compares their mean with the live mean; with 0 draws it
compares the one simulation on the trace's own timing. How large the perturbation is
hardly matters once there is one (on those runs, pauses ±0.5% with starts +2 ms against
±10% with +100 ms moved each router's mean by about 3 points at most, over 32 draws), so
the default is small: ±2% and 10 ms. Deterministic for a seed; nothing here reads a
clock.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from replay.validation.error import ValidateError
from replay.workload import AgentProgram, Workload

#: perturbed timings simulated unless told (``validate --timing-draws``)
DRAWS = 32


@dataclass(frozen=True, slots=True)
class Timings:
    """How many perturbed arrival timings to simulate, and how far each is moved.

    Refused when built (:class:`~replay.validation.error.ValidateError`, one line): a
    count of draws that is not a whole number at least 0, a pause factor's bound outside
    [0, 1) (a factor of 0 or less would make a pause vanish or run backwards), a start
    offset that is negative or not finite, a seed that is not a whole number."""

    #: perturbed timings simulated (0: none; the trace's timing alone is simulated)
    draws: int = DRAWS
    #: each pause scaled by a factor within 1 ± this, 0 <= pause_rel < 1
    pause_rel: float = 0.02
    #: each program's start moved later by up to this many seconds, >= 0
    start_s: float = 0.01
    seed: int = 0

    def __post_init__(self) -> None:
        if not _whole(self.draws) or self.draws < 0:
            raise ValidateError(
                f"--timing-draws must be a whole number at least 0, not {self.draws!r}"
            )
        if not _number(self.pause_rel) or not 0.0 <= self.pause_rel < 1.0:
            raise ValidateError(
                f"a timing perturbation's pause_rel must be at least 0 and below 1, "
                f"not {self.pause_rel!r}"
            )
        if not _number(self.start_s) or not 0.0 <= self.start_s < math.inf:
            raise ValidateError(
                f"a timing perturbation's start_s must be a finite number of seconds at "
                f"least 0, not {self.start_s!r}"
            )
        if not _whole(self.seed):
            raise ValidateError(f"--seed must be a whole number, not {self.seed!r}")

    def to_json(self) -> dict[str, float | int]:
        return {
            "draws": self.draws,
            "pause_rel": self.pause_rel,
            "start_s": self.start_s,
            "seed": self.seed,
        }


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def perturbed(work: Workload, timings: Timings, draw: int) -> Workload:
    """Draw ``draw`` of ``timings``: the same programs and calls, each program's start
    and each pause moved (a pause of zero stays zero)."""
    rng = random.Random(timings.seed * 1_000_003 + draw)
    programs = []
    for program in work.programs:
        start = program.start_s + rng.uniform(0.0, timings.start_s)
        rel = timings.pause_rel
        calls = tuple(
            replace(c, pause_s=c.pause_s * (1.0 + rng.uniform(-rel, rel))) for c in program.calls
        )
        programs.append(AgentProgram(program.program_id, start, calls))
    return Workload(tuple(programs))
