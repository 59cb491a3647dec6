"""What a live run measures, per call and per program, on the client's clock."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class LiveCallRecord:
    """One call as sent and answered: its times (``perf_counter`` seconds), its tokens,
    the server's ``cached_tokens``, and the error that ended it, if any."""

    program_id: str
    turn: int
    tool: str | None
    is_last: bool
    #: wall clock of the send (ns since the epoch), for AIPerf-shaped records
    start_ns: int
    #: perf_counter seconds
    start_s: float
    end_s: float | None = None
    first_token_s: float | None = None
    #: perf_counter time of each streamed chunk that carried tokens
    chunk_s: list[float] = field(default_factory=list)
    prompt_tokens: int = 0
    reused_tokens: int = 0
    requested_output: int = 0
    output_tokens: int = 0
    cached_tokens: int | None = None
    clipped: bool = False
    error: str | None = None
    http_status: int | None = None

    def take(self, chunk: dict[str, Any], now: float, generated: list[int]) -> None:
        """What one streamed chunk tells: usage (cached, prompt and output tokens) and the
        generated token ids (appended to ``generated``), with the time ``now`` they arrived."""
        usage = chunk.get("usage") or {}
        if usage:
            details = usage.get("prompt_tokens_details") or {}
            if details.get("cached_tokens") is not None:
                self.cached_tokens = int(details["cached_tokens"])
            if isinstance(usage.get("completion_tokens"), int):
                self.output_tokens = max(self.output_tokens, usage["completion_tokens"])
            if isinstance(usage.get("prompt_tokens"), int):
                self.prompt_tokens = usage["prompt_tokens"]
        for choice in chunk.get("choices") or ():
            ids = choice.get("token_ids")
            logprobs = choice.get("logprobs")
            if not isinstance(ids, list):
                ids = logprob_ids(logprobs)
            tokens = logprobs.get("tokens") if isinstance(logprobs, dict) else None
            if isinstance(ids, list):
                n = len(ids)
            elif isinstance(tokens, list):  # written as text: timed, though no ids
                n = len(tokens)
            else:
                n = 1 if choice.get("text") else 0
            if isinstance(ids, list):
                generated.extend(int(t) for t in ids)
            if n:
                if self.first_token_s is None:
                    self.first_token_s = now
                self.chunk_s.append(now)

    @property
    def ok(self) -> bool:
        return self.error is None and self.end_s is not None

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.start_s

    @property
    def e2el_s(self) -> float | None:
        return None if self.end_s is None else self.end_s - self.start_s

    @property
    def tpot_s(self) -> float | None:
        """vLLM's TPOT: (latency − TTFT) / (output − 1)."""
        if not self.ok or self.output_tokens < 2 or self.ttft_s is None or self.e2el_s is None:
            return None
        return (self.e2el_s - self.ttft_s) / (self.output_tokens - 1)

    @property
    def itl_s(self) -> list[float]:
        """vLLM's ITL: the gaps between streamed chunks."""
        return [b - a for a, b in itertools.pairwise(self.chunk_s)]


@dataclass(slots=True)
class ProgramRecord:
    """One program of a live run: when its first call was sent and its last one
    finished, and whether it ran to its end."""

    program_id: str
    calls: int
    first_send_s: float | None = None
    last_finish_s: float | None = None
    done: bool = False
    cut_short: bool = False
    late_start_s: float = 0.0
    #: its calls sent so far (the rest, when it is cut short, are never sent)
    sent: int = 0


#: vLLM's flag that writes each token in ``logprobs`` as ``token_id:N`` (what a live client
#: tagging by its ``X-Session-ID`` header alone reads its answer's ids from)
TOKEN_IDS_AS_LOGPROBS = "--return-tokens-as-token-ids"
#: how a server started with :data:`TOKEN_IDS_AS_LOGPROBS` writes a token in ``logprobs``
TOKEN_ID_PREFIX = "token_id:"


def logprob_ids(logprobs: Any) -> list[int] | None:
    """The token ids of a completion chunk's ``logprobs`` (``tokens`` written
    ``token_id:N``), or None where it has none or writes them as text."""
    tokens = logprobs.get("tokens") if isinstance(logprobs, dict) else None
    if not isinstance(tokens, list) or not tokens:
        return None
    if not all(isinstance(t, str) and t.startswith(TOKEN_ID_PREFIX) for t in tokens):
        return None
    try:
        return [int(t[len(TOKEN_ID_PREFIX) :]) for t in tokens]
    except ValueError:
        return None
