"""What is left of a command's servers once it has ended (Linux /proc).

vLLM's API server runs an EngineCore child (on CPU with a worker under it) that renames
itself (``VLLM::EngineCore``), so its command line names neither the port nor the model:
every process is found by a marker variable (:data:`MARK`) in the command's environment,
which all of its descendants inherit (re-parented ones too), and by its process group.
Once the command has ended, none may be left: not one with the marker, not one in the
servers' groups, not one whose command line names the server's port or the model folder.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ttlctl.server.process import group_members

MARK = "TTLCTL_STRAY_TEST"
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
    """Live processes with ``MARK=mark`` in their environment."""
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
    """None of the command's servers is left within :data:`GONE_S` (any left are killed,
    then the test fails)."""
    deadline = time.monotonic() + GONE_S
    while (left := strays(mark, pgids, needles)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for p in left:  # do not leave them to the next tests: then fail
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGKILL)
    assert not left, left


def stop_leaves_nothing(
    proc: subprocess.Popen[bytes], sig: signal.Signals, mark: str, needles: list[str]
) -> None:
    """``ttlctl serve`` (``proc``, its environment marked ``mark``) with its engine core
    running, stopped by ``sig``: within :data:`GONE_S` of its exit nothing of it is left
    (:func:`assert_nothing_left`: its marker, its process groups, ``needles``), and it
    exited 0 or as the signal tells."""
    running = marked(mark)
    pgids = {p.pgid for p in running if p.pid != proc.pid}
    assert any(p.cmdline.startswith("VLLM::EngineCore") for p in running), running
    proc.send_signal(sig)
    code = proc.wait(timeout=60)
    assert_nothing_left(mark, pgids, needles)
    assert code in (0, 128 + sig), code
