"""The closed loop of a live run: each program's calls sent one after the other, in threads.

Call ``k`` of a program repeats the first ``reused_tokens`` of call ``k-1``'s prompt
followed by the token ids the server generated for it (streamed back with
``return_token_ids``), then fresh token ids (seeded per program and turn) up to the
recorded input length. A call whose prompt starts with blocks other programs share
(``Call.shared_keys`` at the server's block size) starts with the same ids for the same
keys in every program (seeded per key), and repeats its own stream after them only when
call ``k-1`` started with the same keys, as the simulator's backends do. ``max_tokens`` is
the recorded output, with ``ignore_eos``.
Requests carry ``vllm_xargs`` (``program_id``, ``tool``, ``is_last``, as the run's
``client_tags`` says a client tags them: :func:`replay.client_tags.vllm_xargs`) and the
``X-Session-ID: <program_id>`` header; under ``session`` the header alone, and the
answer's ids come back in ``logprobs`` (:func:`request_body`). The next call is sent when
the previous one has finished plus the recorded pause. :func:`drain` runs the programs, at most a
number at once, and stops them at the run's deadline or on Ctrl-C (or any exception
in the main thread, :class:`~ttlctl.server.signals.Terminated` included).
"""

from __future__ import annotations

import random
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from replay.client_tags import FULL, SESSION, in_body, vllm_xargs
from replay.live.records import TOKEN_IDS_AS_LOGPROBS, LiveCallRecord, ProgramRecord
from replay.live.trimming import clip
from replay.workload import AgentProgram
from ttlctl.server import sse
from ttlctl.server.client import HTTPStatusError, ServerError
from ttlctl.server.facts import ServerInfo

#: the route every call goes to
COMPLETIONS = "/v1/completions"

Progress = Callable[[int, int], None]


class _Stopped(Exception):
    """The run's deadline passed, or it was stopped, while a call streamed."""


def emit(warn: Callable[[str], None] | None, message: str) -> None:
    """Give ``message`` to ``warn``, or as a :class:`RuntimeWarning`."""
    if warn is not None:
        warn(message)
    else:
        warnings.warn(message, RuntimeWarning, stacklevel=3)


@dataclass
class LiveRun:
    """The state one live run's threads share: the server, the prompts' token pool, the
    deadline and stop flag, and the records made so far."""

    url: str
    info: ServerInfo
    pool: list[int]
    seed: int
    nonce: str
    timeout_request_s: float
    deadline: float
    stop: threading.Event
    progress: Progress | None
    total_calls: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    records: list[LiveCallRecord] = field(default_factory=list)
    done_calls: int = 0
    warned: set[str] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)
    say: Callable[[str], None] | None = None
    #: what each call is tagged with (``--client-tags``: :mod:`replay.client_tags`); the
    #: records keep the trace's tool and last call
    client_tags: str = FULL

    def warn(self, key: str, message: str) -> None:
        with self.lock:
            if key in self.warned:
                return
            self.warned.add(key)
            self.warnings.append(message)
        emit(self.say, message)

    def fresh(self, program: str, turn: int, n: int) -> list[int]:
        rng = random.Random(f"{self.seed}:{self.nonce}:{program}:{turn}")
        return [self.pool[rng.randrange(len(self.pool))] for _ in range(n)]

    def prompt(
        self, program: AgentProgram, turn: int, stream: list[int], inp: int
    ) -> tuple[list[int], int]:
        """Call ``turn``'s prompt of ``inp`` tokens and how many of its first tokens repeat
        the program's stream (see the module docstring)."""
        call = program.calls[turn]
        reused = min(call.reused_tokens, len(stream), inp)
        if call.prefix is None and (turn == 0 or program.calls[turn - 1].prefix is None):
            return stream[:reused] + self.fresh(program.program_id, turn, inp - reused), reused
        bs = self.info.block_size or 16
        keys = call.shared_keys(bs)
        head: list[int] = []
        for key in keys:
            rng = random.Random(f"{self.seed}:{self.nonce}:shared:{key}")
            head += [self.pool[rng.randrange(len(self.pool))] for _ in range(bs)]
        head = head[:inp]
        same = turn > 0 and program.calls[turn - 1].shared_keys(bs) == keys
        keep = max(len(head), reused) if same else len(head)
        own = stream[len(head) : keep] if same else []
        tail = self.fresh(program.program_id, turn, inp - len(head) - len(own))
        return head + own + tail, len(head) + len(own) if same else 0

    def finished(self, record: LiveCallRecord) -> None:
        with self.lock:
            self.records.append(record)
        self.count(1)

    def count(self, calls: int) -> None:
        """``calls`` more done: ended, or never to be sent (a program cut short), so that
        the count ends at the calls, as the vLLM backend's (:mod:`replay.vllmsim.harness`).
        Told under the lock, so that the counts of two threads are told in order."""
        with self.lock:
            self.done_calls += calls
            if self.progress is not None and calls > 0:
                self.progress(self.done_calls, self.total_calls)

    # -- one call ------------------------------------------------------------

    def send(
        self, program: AgentProgram, turn: int, stream: list[int]
    ) -> tuple[LiveCallRecord, list[int]]:
        """Send call ``turn`` of ``program``; (its record, the token ids it generated)."""
        call = program.calls[turn]
        inp, out, clipped = clip(call, self.info.token_limit())
        prompt, reused = self.prompt(program, turn, stream, inp)
        is_last = turn == len(program.calls) - 1
        record = LiveCallRecord(
            program_id=program.program_id,
            turn=turn,
            tool=call.tool,
            is_last=is_last,
            start_ns=time.time_ns(),
            start_s=time.perf_counter(),
            prompt_tokens=len(prompt),
            reused_tokens=reused,
            requested_output=out,
            clipped=clipped,
        )
        generated: list[int] = []
        remaining = self.deadline - time.perf_counter()
        timeout = max(1.0, min(self.timeout_request_s, remaining + 1.0))
        body = self._body(prompt, out, program.program_id, call.tool, is_last)
        try:
            for now, chunk in sse.stream(
                self.url,
                COMPLETIONS,
                body,
                timeout_s=timeout,
                headers={"X-Session-ID": program.program_id},
            ):
                if self.stop.is_set() or now > self.deadline:
                    raise _Stopped
                record.take(chunk, now, generated)
        except HTTPStatusError as exc:
            record.http_status = exc.status
            record.error = str(exc)
        except ServerError as exc:
            record.error = str(exc)
        except _Stopped:
            record.error = "stopped: the run's time limit was reached or it was interrupted"
        if record.error is None:
            record.end_s = time.perf_counter()
            record.output_tokens = max(record.output_tokens, len(generated))
            generated = self._check_answer(program, turn, record, generated)
        self.finished(record)
        return record, prompt + generated

    def _body(
        self, prompt: list[int], out: int, program_id: str, tool: str | None, is_last: bool
    ) -> dict[str, Any]:
        return live_body(
            self.info.model, prompt, out, (program_id, tool, is_last), self.client_tags
        )

    def _check_answer(
        self, program: AgentProgram, turn: int, record: LiveCallRecord, generated: list[int]
    ) -> list[int]:
        """Warn (once) about a server flag that is off; the ids the next call repeats."""
        if not generated and record.output_tokens:
            how = (
                f"as logprobs: start it with {TOKEN_IDS_AS_LOGPROBS}"
                if self.client_tags == SESSION
                else "(return_token_ids)"
            )
            self.warn(
                "token_ids",
                f"{self.url}: the server does not return token ids {how}; "
                "later prompts repeat only the previous prompt, not its output",
            )
            generated = self.fresh(program.program_id, -turn - 1, record.output_tokens)
        if record.cached_tokens is None:
            self.warn(
                "cached",
                f"{self.url}: responses carry no usage.prompt_tokens_details.cached_tokens: "
                "start the server with --enable-prompt-tokens-details to see per-call hits",
            )
        return generated

    # -- one program -----------------------------------------------------------

    def program(self, program: AgentProgram, start_at: float, result: ProgramRecord) -> None:
        """Run ``program``'s calls in turn from ``start_at``; those it did not send (cut
        short) are counted done as it stops."""
        try:
            self._program(program, start_at, result)
        finally:
            self.count(result.calls - result.sent)

    def _program(self, program: AgentProgram, start_at: float, result: ProgramRecord) -> None:
        delay = start_at - time.perf_counter()
        if delay > 0 and self.stop.wait(delay):
            result.cut_short = True
            return
        result.late_start_s = max(0.0, -delay)
        stream: list[int] = []
        for turn, call in enumerate(program.calls):
            if self.stop.is_set() or time.perf_counter() > self.deadline:
                result.cut_short = True
                return
            record, stream = self.send(program, turn, stream)
            result.sent += 1
            if result.first_send_s is None:
                result.first_send_s = record.start_s
            if not record.ok:
                result.cut_short = True
                return
            result.last_finish_s = record.end_s
            if turn < len(program.calls) - 1 and call.pause_s > 0:
                remaining = self.deadline - time.perf_counter()
                if self.stop.wait(min(call.pause_s, max(0.0, remaining))):
                    result.cut_short = True
                    return
        result.done = True


def drain(
    state: LiveRun, jobs: Sequence[tuple[AgentProgram, float | None, ProgramRecord]], workers: int
) -> None:
    """Run the programs in order, at most ``workers`` at once; each starts at its time,
    or as soon as a worker is free (None: a closed population, a new program when one
    ends)."""
    it = iter(jobs)
    lock = threading.Lock()

    def worker() -> None:
        while not state.stop.is_set():
            with lock:
                nxt = next(it, None)
            if nxt is None:
                return
            program, start, record = nxt
            state.program(program, time.perf_counter() if start is None else start, record)

    _join(state, [worker] * workers)
    for _, _, r in it:  # never taken by a worker: none of its calls was sent
        state.count(r.calls)
    for _, _, r in jobs:  # never started: the run was stopped
        if not r.done and r.first_send_s is None:
            r.cut_short = True


def _join(state: LiveRun, targets: list[Callable[[], None]]) -> None:
    """Run the workers; stop them at the deadline, or on any exception in this thread
    (Ctrl-C, a SIGTERM while a server is owned), which is raised again."""
    pool = ThreadPoolExecutor(max_workers=len(targets), thread_name_prefix="ttlctl-live")
    futures = [pool.submit(t) for t in targets]
    try:
        while not all(f.done() for f in futures):
            if time.perf_counter() > state.deadline + 5.0:
                state.stop.set()
            time.sleep(0.05)
        for f in futures:
            f.result()
    except BaseException:
        state.stop.set()
        raise
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def request_body(
    model: str, prompt: list[int], out: int, xargs: dict[str, Any] | None
) -> dict[str, Any]:
    """The ``/v1/completions`` body of a live call: ``prompt`` as token ids, exactly ``out``
    tokens generated (``ignore_eos``), streamed, the answer's token ids returned (the next
    call's prompt repeats them), tagged with ``xargs`` (``vllm_xargs``). ``xargs`` None (a
    client tagging by its ``X-Session-ID`` header alone): neither field, so that
    vllm-router's ``kv_aware`` credits the body; the ids come back in ``logprobs`` instead
    (``token_id:N`` from a server started with ``--return-tokens-as-token-ids``)."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompt,
        "max_tokens": out,
        "min_tokens": out,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if xargs is None:
        return body | {"logprobs": 0}
    return body | {"return_token_ids": True, "vllm_xargs": xargs}


def live_body(
    model: str, prompt: list[int], out: int, call: tuple[str, str | None, bool], mode: str
) -> dict[str, Any]:
    """The body a live client tagging as ``mode`` sends for ``call`` (its program, the tool
    that follows it, whether it is the program's last): :func:`request_body`, its tags in
    the body or (``session``) in the header alone."""
    if not in_body(mode):
        return request_body(model, prompt, out, None)
    return request_body(model, prompt, out, vllm_xargs(*call, mode))
