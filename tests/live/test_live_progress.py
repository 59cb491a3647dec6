"""A live run's progress ends at the workload's calls: a program a failed call or the
run's deadline cuts counts its unsent calls done, as the vLLM backend counts an aborted
call's (replay/live/driver.py; against a stub of vLLM's streamed completions), and
`replay --live` tells which policy it counts for."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar

import pytest

from replay.live import runner
from replay.live.driver import LiveRun, drain
from replay.live.records import ProgramRecord
from replay.workload import AgentProgram, Call, Workload
from tests.http_stub import serving, stream_reply
from tests.live.server_info import server_info

#: the (program, turn) the stub answers with a server error
FAILS = ("p1", 1)


class _Completions(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        xargs = body["vllm_xargs"]
        turn = len(body["prompt"]) // 100 - 1  # call k's prompt: (k + 1) × 100 tokens
        if (xargs["program_id"], turn) == FAILS:
            self.send_error(500)
            return
        chunk = {
            "choices": [{"token_ids": [7] * body["max_tokens"]}],
            "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": 2},
        }
        stream_reply(self, chunk)


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with serving(_Completions) as base:
        yield base


def _program(name: str, calls: int, pause_s: float = 0.0) -> AgentProgram:
    turns = tuple(
        Call((k + 1) * 100, 2, 0, None if k == calls - 1 else "bash", pause_s) for k in range(calls)
    )
    return AgentProgram(name, 0.0, turns)


def _stub_run(
    base: str,
    max_model_len: int,
    deadline_s: float,
    total_calls: int,
    progress: Callable[[int, int], None] | None = None,
) -> LiveRun:
    """A live run's state against the stub at ``base`` (16-token blocks, 512 of them), its
    deadline ``deadline_s`` away, told its progress when ``progress`` is given."""
    return LiveRun(
        url=base,
        info=server_info(url=base, max_model_len=max_model_len, block_size=16, num_gpu_blocks=512),
        pool=list(range(10, 60)),
        seed=0,
        nonce="n",
        timeout_request_s=10.0,
        deadline=time.perf_counter() + deadline_s,
        stop=threading.Event(),
        progress=progress,
        total_calls=total_calls,
        say=lambda message: None,
    )


def _run(
    url: str, programs: list[AgentProgram], deadline_s: float, stopped: bool = False
) -> list[tuple[int, int]]:
    """Drain ``programs`` one at a time (``stopped``: a run stopped before a worker took
    any, as by Ctrl-C); the counts told."""
    told: list[tuple[int, int]] = []
    state = _stub_run(
        url,
        4096,
        deadline_s,
        sum(len(p.calls) for p in programs),
        progress=lambda done, total: told.append((done, total)),
    )
    if stopped:
        state.stop.set()
    jobs = [(p, None, ProgramRecord(p.program_id, len(p.calls))) for p in programs]
    drain(state, jobs, workers=1)
    return told


def test_a_failed_call_counts_its_programs_unsent_calls_done(url: str) -> None:
    """p1's second call fails: its third and fourth are never sent, and counted done."""
    programs = [_program("p0", 2), _program("p1", 4), _program("p2", 3)]
    told = _run(url, programs, deadline_s=60.0)
    assert told[-1] == (9, 9), told
    assert [done for done, _ in told] == sorted({done for done, _ in told})  # rising
    assert (4, 9) in told and (6, 9) in told  # p1's two unsent calls at once, when cut


def test_a_deadline_counts_the_calls_never_sent_done(url: str) -> None:
    """The deadline passes in p0's pause: its last call, and p1 and p2, never start."""
    programs = [_program("p0", 2, pause_s=5.0), _program("p1", 4), _program("p2", 3)]
    told = _run(url, programs, deadline_s=0.5)
    assert told[0] == (1, 9) and told[-1] == (9, 9), told


def test_programs_no_worker_took_count_their_calls_done(url: str) -> None:
    """A stop before the workers take a program: none is sent, and all are counted done."""
    programs = [_program("p0", 2), _program("p1", 4), _program("p2", 3)]
    told = _run(url, programs, deadline_s=60.0, stopped=True)
    assert told == [(2, 9), (6, 9), (9, 9)], told


def test_live_results_names_the_policy_it_tells_of(monkeypatch: pytest.MonkeyPatch) -> None:
    """`replay --live`'s bar said "live": the policy the server runs is told with the count."""

    def run_live(url: str, workload: Workload, policy_label: str, **kw: Any) -> dict[str, Any]:
        kw["progress"](1, 2)
        return {"policy": policy_label}

    monkeypatch.setattr(runner, "run_live", run_live)
    told: list[tuple[str, int, int]] = []
    work = Workload((_program("p0", 2),))
    results = runner.live_results(
        "http://127.0.0.1:1",
        work,
        ["continuum"],
        progress=lambda name, done, total: told.append((name, done, total)),
    )
    assert results == [{"policy": "continuum"}] and told == [("continuum", 1, 2)]


def test_counts_from_two_threads_are_told_in_order() -> None:
    """Two calls ending together are told 1 then 2, never 2 then 1: a bar told 2 then 1
    stays at 1 (and at the end short of the calls). Regression: the count was read under
    the lock and told after it, so a second thread could tell its count in between."""
    told: list[int] = []
    state = LiveRun(
        url="http://127.0.0.1:1",
        info=None,  # type: ignore[arg-type]  # not read by count
        pool=[],
        seed=0,
        nonce="n",
        timeout_request_s=1.0,
        deadline=0.0,
        stop=threading.Event(),
        progress=lambda done, total: tell(done),
        total_calls=2,
    )

    def tell(done: int) -> None:
        if done == 1:  # the other call ends while this one is being told
            other = threading.Thread(target=state.count, args=(1,))
            other.start()
            other.join(timeout=0.2)
        told.append(done)

    state.count(1)
    deadline = time.perf_counter() + 5.0
    while len(told) < 2 and time.perf_counter() < deadline:
        time.sleep(0.01)
    assert told == [1, 2], told


class _Recording(BaseHTTPRequestHandler):
    """Answers every call with its ``max_tokens`` ids of 7 (program ``noids``: text, no
    ids; ``nousage``: no usage) and no cached tokens; keeps each request's
    ``X-Session-ID`` and body."""

    seen: ClassVar[list[tuple[str | None, dict[str, Any]]]] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Recording.seen.append((self.headers.get("X-Session-ID"), body))
        n = body["max_tokens"]
        ids = body["vllm_xargs"]["program_id"] != "noids"
        choice = {"token_ids": [7] * n} if ids else {"text": "x" * n}
        usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": n}
        if body["vllm_xargs"]["program_id"] == "nousage":
            usage = {}
        stream_reply(self, {"choices": [choice], "usage": usage})


def _drain_one(
    program: AgentProgram, start_at: float, max_model_len: int = 4096
) -> tuple[LiveRun, ProgramRecord, list[tuple[str | None, dict[str, Any]]]]:
    """``program`` sent to a fresh recording stub from ``start_at``: the run, the
    program's record and the requests sent."""
    _Recording.seen = []
    with serving(_Recording) as base:
        state = _stub_run(base, max_model_len, 30.0, len(program.calls))
        record = ProgramRecord(program.program_id, len(program.calls))
        drain(state, [(program, start_at, record)], workers=1)
    return state, record, _Recording.seen


def test_each_call_repeats_the_previous_prompt_and_output_after_its_pause() -> None:
    """Call 1 starts with call 0's prompt and the ids the server generated, is sent the
    recorded pause after call 0 ended, asks for exactly the recorded output (ignore_eos,
    ids streamed back) under the program's X-Session-ID; no pause after the last call;
    the program's record spans its first send to its last end, its late start told."""
    calls = (Call(100, 2, 0, "bash", 0.2), Call(150, 3, 102, None, 1.0))
    program = AgentProgram("p", 0.0, calls)
    t0 = time.perf_counter()
    state, prog, seen = _drain_one(program, start_at=t0 - 1.0)
    assert time.perf_counter() - t0 < 0.9  # the last call's pause is not waited
    (h0, b0), (h1, b1) = seen
    assert h0 == h1 == "p"
    assert (b0["max_tokens"], b0["min_tokens"], b1["max_tokens"], b1["min_tokens"]) == (2, 2, 3, 3)
    assert b0["ignore_eos"] is True and b0["return_token_ids"] is True
    assert len(b0["prompt"]) == 100 and len(b1["prompt"]) == 150
    assert b1["prompt"][:102] == b0["prompt"] + [7, 7]
    r0, r1 = sorted(state.records, key=lambda r: r.turn)
    assert (r0.is_last, r1.is_last, r0.reused_tokens, r1.reused_tokens) == (False, True, 0, 102)
    assert (r0.output_tokens, r1.output_tokens) == (2, 3)
    assert r0.end_s is not None and r1.start_s - r0.end_s >= 0.2
    assert abs(r0.start_ns - time.time_ns()) < 60 * 10**9  # the wall clock, for AIPerf
    assert (prog.first_send_s, prog.last_finish_s) == (r0.start_s, r1.end_s)
    assert prog.done and not prog.cut_short and prog.sent == 2
    assert prog.late_start_s >= 1.0  # started a second after its time
    assert [w for w in state.warnings if "cached_tokens" in w], state.warnings  # none given


def test_a_program_started_early_waits_and_is_not_late() -> None:
    program = AgentProgram("p", 0.0, (Call(100, 2, 0, None, 0.0),))
    t0 = time.perf_counter()
    _, prog, _ = _drain_one(program, start_at=t0 + 0.2)
    assert prog.late_start_s == 0.0 and prog.first_send_s is not None
    assert prog.first_send_s - t0 >= 0.2


def test_a_clipped_prompt_repeats_no_more_than_it_holds() -> None:
    """A server of 100 tokens: call 1 (150 + 3) is clipped to a 97-token prompt, which
    repeats 97 of call 0's 98 + 2 tokens, not all 100 of them."""
    calls = (Call(100, 2, 0, "bash", 0.0), Call(150, 3, 102, None, 0.0))
    state, prog, seen = _drain_one(AgentProgram("p", 0.0, calls), time.perf_counter(), 100)
    assert [len(b["prompt"]) + b["max_tokens"] for _, b in seen] == [100, 100]
    r1 = max(state.records, key=lambda r: r.turn)
    assert r1.clipped and r1.reused_tokens == 97 and prog.done


def test_a_server_without_token_ids_is_told_and_later_prompts_still_have_their_length() -> None:
    calls = (Call(100, 4, 0, "bash", 0.0), Call(150, 3, 104, None, 0.0))
    state, prog, seen = _drain_one(AgentProgram("noids", 0.0, calls), time.perf_counter())
    assert [len(b["prompt"]) for _, b in seen] == [100, 150]
    assert seen[1][1]["prompt"][:100] == seen[0][1]["prompt"]
    assert [w for w in state.warnings if "return_token_ids" in w], state.warnings
    r1 = max(state.records, key=lambda r: r.turn)
    assert r1.reused_tokens == 104 and prog.done  # 4 ids stand for the output not streamed


def test_the_output_is_the_ids_streamed_when_no_usage_tells_it() -> None:
    program = AgentProgram("nousage", 0.0, (Call(100, 4, 0, None, 0.0),))
    state, prog, _ = _drain_one(program, time.perf_counter())
    assert [r.output_tokens for r in state.records] == [4] and prog.done


class _Slow(BaseHTTPRequestHandler):
    """Streams one token every 0.1 s for 2 s."""

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            for _ in range(20):
                chunk = {"choices": [{"token_ids": [7]}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
                time.sleep(0.1)
            self.wfile.write(b"data: [DONE]\n\n")
        except OSError:  # the client stopped reading
            pass


def test_a_call_still_streaming_at_the_deadline_is_stopped_there() -> None:
    """The deadline passes while a call streams: the call stops at the next chunk (an
    error that says so, its program cut short), not when the stream ends."""
    program = AgentProgram("p", 0.0, (Call(100, 20, 0, None, 0.0),))
    with serving(_Slow) as base:
        state = _stub_run(base, 4096, 0.3, 1)
        record = ProgramRecord("p", 1)
        t0 = time.perf_counter()
        drain(state, [(program, t0, record)], workers=1)
        took = time.perf_counter() - t0
    (call,) = state.records
    assert call.error is not None and call.error.startswith("stopped"), call.error
    assert record.cut_short and took < 1.5
