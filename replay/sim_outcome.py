"""What a replay returns (:class:`Outcome`): each call's record (:class:`SimCallRecord`),
each program's run (:class:`ProgramRun`, which the loop advances as its calls finish),
the calls rejected or truncated, and the engine with its counters.

The single-engine loop (:func:`replay.sim.simulate`) returns an :class:`Outcome`; the
fleet's loop (:mod:`replay.fleet`) and the vLLM backend (:mod:`replay.vllmsim.outcome`)
keep the same records, so that the figures (:mod:`replay.figures`) read one shape.
"""

from __future__ import annotations

from dataclasses import dataclass

from replay.request import SimRequest
from replay.scheduler import SimScheduler
from replay.workload import AgentProgram


@dataclass(slots=True)
class ProgramRun:
    program: AgentProgram
    start: float
    next_turn: int = 0
    #: when the program's first call was sent (its JCT counts from here)
    first_arrival: float | None = None
    #: when that call reached the scheduler (the key of program-level FCFS)
    program_start: float | None = None
    #: the request id of the program's first call (its arrival order)
    first_rid: int = 0
    last_finish: float | None = None
    done: bool = False
    cut_short: bool = False


@dataclass(slots=True)
class SimCallRecord:
    program: str
    turn: int
    #: when the call was sent (vLLM's arrival_time)
    arrival: float
    admitted: float
    first_token: float
    finish: float
    prompt: int
    output: int
    hit_tokens: int
    preemptions: int
    #: the engine step the call was first admitted in and the one it finished in (0-based,
    #: counting the steps that computed something; a merged run of decode steps counts
    #: each of its steps), as the vLLM backend counts vLLM's steps
    admitted_step: int = -1
    finish_step: int = -1

    @classmethod
    def of(cls, req: SimRequest, now: float, finish_step: int) -> SimCallRecord:
        """The record of ``req``, finished at ``now`` in engine step ``finish_step``."""
        assert req.admitted is not None and req.first_token is not None
        return cls(
            req.program,
            req.turn,
            req.arrival if req.sent is None else req.sent,
            req.admitted,
            req.first_token,
            now,
            req.prompt,
            req.output,
            req.hit_tokens,
            req.preemptions,
            req.admitted_step,
            finish_step,
        )


@dataclass(slots=True)
class Outcome:
    calls: list[SimCallRecord]
    programs: list[ProgramRun]
    rejected_calls: int
    truncated_calls: int
    engine: SimScheduler
    end: float
