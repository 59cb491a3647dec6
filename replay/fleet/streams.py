"""What each replica holds of each program's token stream.

A call that lands on a replica other than the one that served its program's previous
call finds there only what that replica kept of the program's older stream: its
reusable prefix is the part of its prompt that replica last saw
(:mod:`replay.fleet.prompts`).
"""

from __future__ import annotations

from collections.abc import Hashable
from itertools import count

from replay.fleet.prompts import ProgramPrompts, common_prefix, program_prompts
from replay.fleet.routers.base import RoutedCall
from replay.workload import AgentProgram, Workload


class Streams:
    """The programs' prompts, and the turn whose stream each replica last held."""

    __slots__ = ("_block_size", "_last_turn", "_programs", "prompts")

    def __init__(self, workload: Workload, block_size: int) -> None:
        ids = count()
        self._block_size = block_size
        self.prompts: dict[str, ProgramPrompts] = {
            p.program_id: program_prompts(p, ids, block_size) for p in workload.programs
        }
        self._programs: dict[str, AgentProgram] = {p.program_id: p for p in workload.programs}
        #: (program, replica) -> the turn whose stream that replica last held
        self._last_turn: dict[tuple[str, int], int] = {}

    def held(self, program: str, replica: int, turn: int) -> None:
        """``replica`` now holds the program's stream up to ``turn``'s prompt."""
        self._last_turn[(program, replica)] = turn

    def reusable(self, replica: int, call: RoutedCall) -> int:
        """Prompt tokens of ``call`` that repeat what ``replica`` last held of its program."""
        turn = self._last_turn.get((call.program, replica))
        if turn is None or call.turn == 0:
            return 0
        if turn == call.turn - 1:
            return self._programs[call.program].calls[call.turn].reused_tokens
        return common_prefix(call.prompt, self.prompts[call.program].stream(turn))

    def shared(self, call: RoutedCall) -> tuple[Hashable, ...]:
        """The keys of the call's blocks shared with other programs."""
        return self._programs[call.program].calls[call.turn].shared_keys(self._block_size)
