"""The live client tags each call as ``--client-tags`` says (``replay.client_tags``), as the
simulated clients do, so that ``validate`` compares like with like: the ``vllm_xargs`` of
the bodies :meth:`LiveRun.send` posts, read off the stream it opens (no server)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar

import pytest

from replay.live import run_live
from replay.live.driver import LiveRun, drain
from replay.live.records import ProgramRecord
from replay.workload import AgentProgram, Call, Workload
from tests.http_stub import serving
from tests.live.server_info import server_info
from ttlctl.errors import ConfigError
from ttlctl.server import sse
from ttlctl.server.client import ServerError

PROGRAM = AgentProgram(
    "job-1",
    0.0,
    (Call(40, 4, 0, "bash", 0.5), Call(60, 4, 44, "pytest", 1.0), Call(80, 4, 64, None, 0.0)),
)


def _sent(tags: str, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The ``vllm_xargs`` and session header of every call of :data:`PROGRAM` sent by a
    live run tagging as ``tags``."""
    return [{**body["vllm_xargs"], "header": header} for header, body in _posted(tags, monkeypatch)]


def _posted(tags: str, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """The session header and the body of every call of :data:`PROGRAM` sent by a live run
    tagging as ``tags`` (each stream fails at once: nothing else is wanted)."""
    sent: list[tuple[str, dict[str, Any]]] = []

    def stream(
        url: str, path: str, body: dict[str, Any], **kw: Any
    ) -> Iterator[tuple[float, dict[str, Any]]]:
        sent.append((kw["headers"]["X-Session-ID"], body))
        raise ServerError("not a server")

    monkeypatch.setattr(sse, "stream", stream)
    info = server_info(url="http://x", model="m")
    run = LiveRun(
        "http://x",
        info,
        list(range(100, 200)),
        0,
        "n",
        10.0,
        1e9,
        threading.Event(),
        None,
        3,
        client_tags=tags,
    )
    for turn in range(len(PROGRAM.calls)):
        run.send(PROGRAM, turn, [])
    return sent


def test_full_tags_name_the_tools_and_the_last_call(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _sent("full", monkeypatch) == [
        {"program_id": "job-1", "is_last": 0, "tool": "bash", "header": "job-1"},
        {"program_id": "job-1", "is_last": 0, "tool": "pytest", "header": "job-1"},
        {"program_id": "job-1", "is_last": 1, "header": "job-1"},
    ]


def test_tool_tags_never_say_a_call_is_the_last(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _sent("tool", monkeypatch) == [
        {"program_id": "job-1", "tool": "bash", "header": "job-1"},
        {"program_id": "job-1", "tool": "pytest", "header": "job-1"},
        {"program_id": "job-1", "header": "job-1"},
    ]


def test_no_tags_name_the_program_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _sent("none", monkeypatch) == [{"program_id": "job-1", "header": "job-1"}] * 3


def test_session_tags_name_the_program_by_the_header_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No tags and no request for token ids in the body (vllm-router's kv_aware credits
    it); the answer's ids asked for as logprobs."""
    posted = _posted("session", monkeypatch)
    assert [header for header, _ in posted] == ["job-1"] * 3
    for _, body in posted:
        assert "vllm_xargs" not in body and "return_token_ids" not in body
        assert body["logprobs"] == 0


class _Logprobs(BaseHTTPRequestHandler):
    """A completions stream whose tokens are in ``logprobs`` only: ``token_id:N`` (a server
    started with --return-tokens-as-token-ids) or text; the first chunk's text is empty
    (held back, as a partial character is), its token there all the same."""

    seen: ClassVar[list[tuple[str | None, dict[str, Any]]]] = []
    as_ids: ClassVar[bool] = True

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append((self.headers.get("X-Session-ID"), body))
        n = body["max_tokens"]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for k in range(n):
            token = f"token_id:{8 + k}" if type(self).as_ids else "x"
            choice = {"text": "" if k == 0 else "x", "logprobs": {"tokens": [token]}}
            self.wfile.write(f"data: {json.dumps({'choices': [choice]})}\n\n".encode())
        usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": n,
                 "prompt_tokens_details": {"cached_tokens": 0}}  # fmt: skip
        self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")


def _session_run(as_ids: bool) -> tuple[LiveRun, ProgramRecord, list[str]]:
    """Three calls of one program, tagged by the header alone, against :class:`_Logprobs`."""
    _Logprobs.seen, _Logprobs.as_ids = [], as_ids
    calls = (
        Call(100, 3, 0, "bash", 0.0),
        Call(150, 3, 103, None, 0.0),
        Call(200, 3, 153, None, 0.0),
    )
    program = AgentProgram("p", 0.0, calls)
    said: list[str] = []
    with serving(_Logprobs) as base:
        state = LiveRun(
            url=base,
            info=server_info(url=base, max_model_len=4096, block_size=16, num_gpu_blocks=512),
            pool=list(range(10, 60)),
            seed=0,
            nonce="n",
            timeout_request_s=10.0,
            deadline=time.perf_counter() + 30.0,
            stop=threading.Event(),
            progress=None,
            total_calls=len(calls),
            say=said.append,
            client_tags="session",
        )
        record = ProgramRecord("p", len(calls))
        drain(state, [(program, time.perf_counter(), record)], workers=1)
    return state, record, said


def test_a_session_client_repeats_the_ids_its_answers_gave_as_logprobs() -> None:
    state, record, said = _session_run(as_ids=True)
    (h0, b0), (h1, b1), _ = _Logprobs.seen
    assert (h0, h1) == ("p", "p") and "vllm_xargs" not in b0 and b0["logprobs"] == 0
    assert b1["prompt"][:103] == b0["prompt"] + [8, 9, 10]  # the answer, then fresh ids
    first = min(state.records, key=lambda r: r.turn)
    assert len(first.chunk_s) == 3  # the chunk with no text but a token is timed
    assert record.done and said == []


def test_a_session_client_says_once_when_the_server_writes_tokens_as_text() -> None:
    state, record, said = _session_run(as_ids=False)
    assert len(said) == 1 and "start it with --return-tokens-as-token-ids" in said[0], said
    assert record.done and all(r.ok for r in state.records)


def test_a_run_with_unknown_tags_is_refused_before_the_server_is_asked() -> None:
    with pytest.raises(ConfigError, match="--client-tags must be one of full, tool, none, session"):
        run_live("http://127.0.0.1:9", Workload((PROGRAM,)), "vllm", client_tags="some")
