"""A call sent to vLLM's scheduler by the harness: :func:`call_request` makes the vLLM
``Request`` it is sent as (tagged for the plugin as a client tags it: its program, whether
it is the program's last call, its tool), and :class:`SentCall` is what the harness keeps
of it until it finishes (:meth:`SentCall.record`: its :class:`VllmCall`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vllm.sampling_params import SamplingParams
from vllm.v1.request import Request

from replay.client_tags import vllm_xargs
from replay.sim_outcome import ProgramRun
from replay.vllmsim.outcome import VllmCall
from replay.workload import Call


def call_request(
    request_id: str,
    prompt: list[int],
    call: Call,
    program_id: str,
    *,
    is_last: bool,
    untagged_last: bool,
    tags: str,
    sent: float,
    hasher: Callable[[Any], list[Any]],
) -> Request:
    """The vLLM ``Request`` of ``call`` sent at ``sent``: ``extra_args`` name its program,
    whether it is the last call (``untagged_last``: a client that does not say, so its
    last call looks like one more tool call, of the tool ``unknown``) and its tool, as a
    client tagging as ``tags`` says them (:func:`replay.client_tags.vllm_xargs`)."""
    tool = call.tool
    if is_last and untagged_last:
        is_last = False
        tool = tool or "unknown"
    xargs = vllm_xargs(program_id, tool, is_last, tags)
    return Request(
        request_id=request_id,
        prompt_token_ids=prompt,
        sampling_params=SamplingParams(
            max_tokens=call.output_tokens, ignore_eos=True, temperature=0.0, extra_args=xargs
        ),
        pooling_params=None,
        arrival_time=sent,
        block_hasher=hasher,
    )


@dataclass(slots=True)
class SentCall:
    """A call in vLLM's scheduler: its program's run and turn, its ``Request``, when it was
    sent and reached the scheduler, the output token ids the stand-in executor samples, and
    what its steps saw (admitted when and at which step, its first token, its prefix hit)."""

    run: ProgramRun
    turn: int
    request: Request
    sent: float
    reached: float
    outputs: list[int]
    admitted: float | None = None
    admitted_step: int = -1
    first_token: float | None = None
    hit_tokens: int = 0

    def record(self, request_id: str, finish: float, step: int) -> VllmCall:
        """Its record, finished at ``finish`` by step ``step``."""
        request = self.request
        assert self.admitted is not None
        return VllmCall(
            program=self.run.program.program_id,
            turn=self.turn,
            arrival=self.sent,
            admitted=self.admitted,
            first_token=self.first_token if self.first_token is not None else finish,
            finish=finish,
            prompt=int(request.num_prompt_tokens),
            output=int(request.num_output_tokens),
            hit_tokens=self.hit_tokens,
            preemptions=int(request.num_preemptions),
            request_id=request_id,
            reached=self.reached,
            admitted_step=self.admitted_step,
            finish_step=step,
        )
