"""Token ids for a replay: each program one stream, everything else never seen before.

A call's prompt repeats the first ``reused_tokens`` of its program's previous
call (prompt + output, as the engine returned it) exactly; the rest of the prompt
and every output token are fresh ids that occur nowhere else. So a prefix hit is
exactly the workload's reuse, in full blocks, and no block is shared between
programs (as the fast backend models it). vLLM's scheduler never checks ids
against a vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: ids below this are never handed out (room for special tokens of a real vocabulary)
FIRST_ID = 1000


@dataclass(slots=True)
class Streams:
    _next: int = FIRST_ID
    #: program -> its previous call's prompt + output
    _last: dict[str, list[int]] = field(default_factory=dict)

    def fresh(self, n: int) -> list[int]:
        ids = list(range(self._next, self._next + n))
        self._next += n
        return ids

    def prompt(self, program: str, reused: int, length: int) -> list[int]:
        """The prompt of a call of ``program``: ``reused`` tokens of its stream, then fresh."""
        last = self._last.get(program, [])
        keep = max(0, min(reused, len(last), length))
        return last[:keep] + self.fresh(length - keep)

    def finished(self, program: str, tokens: list[int]) -> None:
        """The call's prompt + output: what the program's next prompt repeats."""
        self._last[program] = tokens

    def forget(self, program: str) -> None:
        self._last.pop(program, None)
