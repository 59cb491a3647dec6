"""A server's processes: launched in a session of their own, found by group, stopped together.

vLLM's OpenAI server is several processes: the API server, its EngineCore child (and
on CPU a worker under that), a multiprocessing resource tracker. :func:`launch` starts
the command with ``start_new_session`` (``setsid``), so the API server leads a new
process group that every one of them inherits, and keeps even when re-parented after
its parent died. :func:`group_members` finds them by that group (``/proc``), and
:func:`stop_group` stops them all: SIGTERM to the group, a grace period, then SIGKILL
to whatever is left, also when it is interrupted while it waits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

#: seconds the group gets to go after SIGKILL
KILL_WAIT_S = 5.0


#: the ports :func:`free_port` handed out in this process, never handed out again: the
#: servers and the router one command starts are each given a port before any of them
#: binds one, and the system may offer a port again while nothing listens on it (a
#: router given its replica's port found that replica answering its health check)
_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago and that this process was not
    given before."""
    held: list[socket.socket] = []  # kept bound while looking, so each offer is new
    try:
        while True:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(s)
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
            if port not in _HANDED_OUT:
                _HANDED_OUT.add(port)
                return port
    finally:
        for s in held:
            s.close()


def port_taken(port: int) -> bool:
    """Whether a process listens on ``port`` of 127.0.0.1 now (a server given that port
    could not bind it: probed as a server binds, with ``SO_REUSEADDR``, so a closed
    connection's lingering port does not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def launch(
    command: Sequence[str],
    env: Mapping[str, str],
    *,
    log: Path | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``command`` as the leader of a new session (its pid is its group's id).

    With ``log`` its output goes there and it reads nothing; without, it shares this
    process's terminal (``ttlctl serve``).
    """
    if log is None:
        return subprocess.Popen(list(command), env=dict(env), cwd=cwd, start_new_session=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        return subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
        )


def process_stats() -> Iterator[tuple[int, list[str]]]:
    """``(pid, the fields of /proc/PID/stat after the command name)`` of every process,
    zombies too (field 3, the state, is the first; field ``n`` is at ``n - 3``)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ..."; comm may hold spaces and parentheses
        yield int(entry.name), stat[stat.rfind(")") + 2 :].split()


def live_processes() -> Iterator[tuple[int, int, int]]:
    """``(pid, ppid, pgrp)`` of every live (non-zombie) process, from Linux's ``/proc``."""
    for pid, fields in process_stats():
        if len(fields) >= 3 and fields[0] not in ("Z", "X"):
            yield pid, int(fields[1]), int(fields[2])


def group_members(pgid: int) -> list[int]:
    """The live (non-zombie) processes of process group ``pgid``, re-parented ones too.

    Off Linux (no ``/proc``) the kernel is asked whether the group has any process at
    all, and the answer is ``[pgid]`` or nothing.
    """
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        except PermissionError:
            return [pgid]
        return [pgid]
    return [pid for pid, _, pgrp in live_processes() if pgrp == pgid]


def group_alive(pgid: int) -> bool:
    """Whether any live (non-zombie) process is left in process group ``pgid``."""
    return bool(group_members(pgid))


def signal_group(pgid: int, signum: int) -> None:
    """Send ``signum`` to every process of group ``pgid`` (none left: nothing happens)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _wait_gone(pgid: int, deadline: float) -> None:
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)


def stop_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """Stop a process started by :func:`launch` and its whole group: SIGTERM, then
    SIGKILL to whatever is left after ``grace_s`` (at once if the wait is interrupted,
    by Ctrl-C or another signal's exception)."""
    pgid = proc.pid  # a session leader's pid is its group's id
    deadline = time.monotonic() + grace_s
    try:
        signal_group(pgid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=grace_s)
        _wait_gone(pgid, deadline)
    finally:
        if group_alive(pgid):
            signal_group(pgid, signal.SIGKILL)
            _wait_gone(pgid, time.monotonic() + KILL_WAIT_S)
        if proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=KILL_WAIT_S)


def wait_healthy(proc: subprocess.Popen[bytes], url: str, deadline: float) -> str | None:
    """Poll ``url``/health until it answers 200: None, or why it never will."""
    while True:
        code = proc.poll()
        if code is not None:
            return f"exited with code {code} before it was ready"
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2.0) as resp:
                if resp.status == 200:
                    return None
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            return "not healthy before its start-up deadline"
        time.sleep(0.5)
