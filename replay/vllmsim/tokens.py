"""Token ids for a replay: each program one stream, shared blocks one run of ids each,
everything else never seen before.

A call's prompt starts with its shared blocks (``Call.shared_keys``): each key stands
for ``block_size`` ids, the same wherever the key occurs, so every program whose prompt
starts with the same keys sends the same tokens and vLLM's prefix cache (which hashes
the tokens) finds the blocks another program computed. Then the prompt repeats its
program's previous call (prompt + output, as the engine returned it) up to
``reused_tokens``, but only when that call started with the same shared keys (otherwise
its stream followed other tokens, and the fast backend does not hit it either); the rest
of the prompt and every output token are fresh ids that occur nowhere else. So a prefix
hit is exactly the shared prefix and the workload's reuse, in full blocks, as the fast
backend models it. vLLM's scheduler never checks ids against a vocabulary.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from replay.workload import Call

#: ids below this are never handed out (room for special tokens of a real vocabulary)
FIRST_ID = 1000


@dataclass(slots=True)
class Streams:
    _next: int = FIRST_ID
    #: program -> its previous call's prompt + output
    _last: dict[str, list[int]] = field(default_factory=dict)
    #: program -> its previous call's shared keys
    _keys: dict[str, tuple[Hashable, ...]] = field(default_factory=dict)
    #: shared key -> its block's ids
    _blocks: dict[Hashable, list[int]] = field(default_factory=dict)

    def fresh(self, n: int) -> list[int]:
        ids = list(range(self._next, self._next + n))
        self._next += n
        return ids

    def prompt(
        self,
        program: str,
        reused: int,
        length: int,
        shared: tuple[Hashable, ...] = (),
        block_size: int = 16,
    ) -> list[int]:
        """The prompt of a call of ``program``: its ``shared`` blocks (keys of
        ``block_size`` tokens), then up to ``reused`` tokens of its stream (when its
        previous call had the same keys), then fresh."""
        if not shared and program not in self._keys:
            last = self._last.get(program, [])
            keep = max(0, min(reused, len(last), length))
            return last[:keep] + self.fresh(length - keep)
        head: list[int] = []
        for key in shared:
            ids = self._blocks.get(key)
            if ids is None:
                ids = self._blocks[key] = self.fresh(block_size)
            head += ids
        head = head[:length]
        last = self._last.get(program, []) if self._keys.get(program, ()) == shared else []
        keep = max(len(head), min(reused, len(last), length))
        self._keys[program] = shared
        return head + last[len(head) : keep] + self.fresh(length - keep)

    def call_prompt(self, program: str, turn: int, call: Call, block_size: int) -> list[int]:
        """The prompt of ``call``, turn ``turn`` of ``program`` (:meth:`prompt` with the
        call's reuse, length and shared keys in engine blocks of ``block_size``)."""
        reused = call.reused_tokens if turn else 0
        shared = call.shared_keys(block_size)
        return self.prompt(program, reused, call.input_tokens, shared, block_size)

    def finished(self, program: str, tokens: list[int]) -> None:
        """The call's prompt + output: what the program's next prompt repeats."""
        self._last[program] = tokens

    def forget(self, program: str) -> None:
        self._last.pop(program, None)
        self._keys.pop(program, None)
