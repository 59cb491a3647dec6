"""Every call's prompt in a vLLM fleet (:class:`TokenBook`), and what a router reading a
replica's KV events knows of it (:class:`KvEvents`).

A call's tokens are the same on whichever replica it lands (one stream per program,
fleet-wide, :mod:`replay.vllmsim.tokens`), so a call routed to another replica hits there
exactly what that replica's prefix cache still holds of the program's stream. The prompt
is built once, whole; a replica whose engine truncates the call (``--truncate``, an
engine smaller than the call) sees its leading tokens, as many as the truncated call
keeps, and the leading block hashes of them (vLLM chains a block's hash to the one
before it, so the hashes of a prefix are a prefix of the hashes).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from vllm.sampling_params import SamplingParams
from vllm.v1.request import Request

from replay.kv import Keys
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig, fits_engine
from replay.vllmsim.tokens import Streams
from replay.workload import Workload

#: the request id of the throwaway requests that hash a prompt for a cache lookup
_LOOKUP = "kv-events-lookup"


@dataclass(frozen=True, slots=True)
class Prompt:
    """A call's prompt as one replica's vLLM sees it."""

    tokens: list[int]
    #: vLLM's block hashes of its full blocks
    hashes: list[Any]


class TokenBook:
    """The token ids of every call of the fleet (one stream per program, whichever
    replica served each call), and each program's next call."""

    __slots__ = ("_calls", "_config", "_hasher", "_next", "_prompts", "streams")

    def __init__(self, workload: Workload, config: ReplayConfig, hasher: Any) -> None:
        self._calls = {p.program_id: p.calls for p in workload.programs}
        self._config = config
        self._hasher = hasher
        self.streams = Streams()
        #: program -> its next call's turn (its calls run one after another)
        self._next: dict[str, int] = {}
        #: (program, turn) -> the call's whole prompt
        self._prompts: dict[tuple[str, int], Prompt] = {}

    def prompt(self, program: str, turn: int, engine: SimSchedulerConfig) -> Prompt | None:
        """Call ``turn``'s prompt on a replica whose engine is ``engine`` (None: that
        engine refuses the call). The whole prompt is built the first time any replica
        asks: when the call is routed (the previous call has finished) or arrives."""
        raw = self._calls[program][turn]
        config = (
            self._config if engine == self._config.engine else replace(self._config, engine=engine)
        )
        call, _ = fits_engine(raw, config)
        if call is None:
            return None
        key = (program, turn)
        whole = self._prompts.get(key)
        if whole is None:
            tokens = self.streams.call_prompt(program, turn, raw, self.block_size)
            probe = Request(
                request_id=_LOOKUP,
                prompt_token_ids=tokens,
                sampling_params=SamplingParams(max_tokens=1),
                pooling_params=None,
                block_hasher=self._hasher,
            )
            whole = self._prompts[key] = Prompt(tokens, list(probe.block_hashes))
        n = call.input_tokens
        if n == len(whole.tokens):
            return whole
        return Prompt(whole.tokens[:n], whole.hashes[: n // self.block_size])

    @property
    def block_size(self) -> int:
        return self._config.engine.block_size

    def next_prompt(self, program: str, engine: SimSchedulerConfig) -> Prompt | None:
        return self.prompt(program, self._next.get(program, 0), engine)

    def finished(self, program: str, turn: int, tokens: list[int]) -> None:
        """Call ``turn`` finished with ``tokens`` (prompt + output): the next one repeats them."""
        self._prompts.pop((program, turn), None)
        self._next[program] = turn + 1
        if turn + 1 < len(self._calls[program]):
            self.streams.finished(program, tokens)
        else:
            self.streams.forget(program)


class KvEvents:
    """What a router subscribed to the replica's KV events knows: which of a prompt's
    blocks the replica's block pool holds (vLLM's own prefix lookup, read-only)."""

    __slots__ = ("_book", "_engine", "_manager")

    def __init__(self, scheduler: Any, book: TokenBook, engine: SimSchedulerConfig) -> None:
        self._manager = scheduler.kv_cache_manager
        self._book = book
        self._engine = engine

    def prefix_hit(self, program: str, keys: Keys, reusable: int, cap: int) -> int:
        """Leading blocks of the program's next call (the one being routed) cached here,
        at most ``cap`` (``keys`` and ``reusable`` are the fast engine's model of the same:
        vLLM's block hashes say it directly)."""
        prompt = self._book.next_prompt(program, self._engine)
        if prompt is None:
            return 0
        bs = self._book.block_size
        longest = min(cap * bs, len(prompt.tokens) - 1)
        if longest <= 0:
            return 0
        _, hit, _ = self._manager.coordinator.find_longest_cache_hit(prompt.hashes, longest)
        return int(hit) // bs
