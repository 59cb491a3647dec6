"""One request as the simulated scheduler sees it: lengths, progress and timestamps.

A request is one LLM call of an agent program. It carries what an engine knows
(program id, turn, the tool tag the client sent, prompt and output lengths, how
much of the prompt repeats the program's previous stream) and the scheduler's
bookkeeping (tokens computed and generated, blocks held, preemptions, when it was
admitted, produced its first token and finished). Never a pause's length or how
many calls the program has left: the policies read requests.

Invariants (checked by ``--check`` replays, ``replay.invariants``): ``num_computed_tokens`` ≤
``num_tokens`` = ``prompt`` + tokens sampled so far (``generated``, while it runs;
at finish ``num_computed_tokens`` = ``prompt + output − 1``: the last sampled token is never
computed); a running request holds ``blocks`` = ⌈``num_computed_tokens`` / block size⌉ blocks
between steps (a step's blocks are allocated at its start), a waiting one none;
``hit_tokens`` is a multiple of the block size below ``prompt``; arrival ≤ admitted ≤
first token ≤ finish.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from ttlctl.engine.calls import Live


@dataclass(slots=True, eq=False)
class SimRequest:
    rid: int
    program: str
    turn: int
    arrival: float
    #: first arrival of the request's program (program-level FCFS)
    program_start: float
    prompt: int
    output: int
    #: prompt tokens that repeat the program's previous stream (prompt + output)
    reusable: int
    tool: str | None
    is_last: bool
    #: tokens in the request's stream: prompt + tokens sampled so far
    num_tokens: int = 0
    #: tokens whose KV is computed
    num_computed_tokens: int = 0
    generated: int = 0
    blocks: int = 0
    hit_tokens: int = 0
    loaded_tokens: int = 0
    preempted: bool = False
    preemptions: int = 0
    preempt_seq: int = 0
    admitted: float | None = None
    #: index of the engine step it was first admitted in (steps that computed something)
    admitted_step: int = -1
    first_token: float | None = None
    finish: float | None = None
    #: order of entry into the running list (the list stays sorted by it)
    run_seq: int = 0
    #: the policy's waiting-queue key, kept while the request waits
    qkey: tuple[float, ...] = ()
    #: in the aggregated decode set (its token counts are then kept there)
    decoding: bool = False
    #: while decoding: the decode set's step when its counts were last written back, and
    #: its computed and generated tokens then (``replay.decoders``)
    synced_step: int = 0
    synced_computed_tokens: int = 0
    synced_generated: int = 0
    #: its membership of the decode set (a finish entry of an earlier one is stale)
    epoch: int = 0
    #: arrival order of the program's first call: breaks ties between programs
    #: that started at the same instant, as a real engine sees them one after another
    program_seq: int = 0
    #: when the client sent it (``arrival`` is when the scheduler saw it: the next
    #: step boundary); None: at ``arrival``
    sent: float | None = None
    #: what the pin rules keep about it from arrival to finish (policies that pin or
    #: order by program; None otherwise)
    live: Live | None = None
    #: keys of the prompt's leading blocks other programs share (``Call.shared_keys``)
    shared: tuple[Hashable, ...] = ()

    def __post_init__(self) -> None:
        self.num_tokens = self.prompt
