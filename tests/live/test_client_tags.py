"""The live client tags each call as ``--client-tags`` says (``replay.client_tags``), as the
simulated clients do, so that ``validate`` compares like with like: the ``vllm_xargs`` of
the bodies :meth:`LiveRun.send` posts, read off the stream it opens (no server)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from replay.live import run_live
from replay.live.driver import LiveRun
from replay.workload import AgentProgram, Call, Workload
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
    live run tagging as ``tags`` (each stream fails at once: nothing else is wanted)."""
    sent: list[dict[str, Any]] = []

    def stream(
        url: str, path: str, body: dict[str, Any], **kw: Any
    ) -> Iterator[tuple[float, dict[str, Any]]]:
        sent.append({**body["vllm_xargs"], "header": kw["headers"]["X-Session-ID"]})
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


def test_a_run_with_unknown_tags_is_refused_before_the_server_is_asked() -> None:
    with pytest.raises(ConfigError, match="--client-tags must be one of full, tool, none, session"):
        run_live("http://127.0.0.1:9", Workload((PROGRAM,)), "vllm", client_tags="some")
