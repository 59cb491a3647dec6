"""Starting and stopping a server process we own (a vLLM server, for live runs and tests)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def group_alive(pgid: int) -> bool:
    """Whether any live (non-zombie) process is left in process group ``pgid``."""
    proc = Path("/proc")
    if not proc.is_dir():  # not Linux: ask the kernel (zombies count as alive)
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ..."; comm may hold spaces and parentheses
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) >= 3 and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


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


def stop_group(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """Stop a process started with ``start_new_session``: SIGTERM its whole group, then
    SIGKILL whatever is left after ``grace_s``."""
    pgid = proc.pid  # start_new_session: the leader's pid is the group id
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if group_alive(pgid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
        kill_deadline = time.monotonic() + 5.0
        while group_alive(pgid) and time.monotonic() < kill_deadline:
            time.sleep(0.05)
    if proc.poll() is None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5.0)
