"""A server in the foreground (``ttlctl serve``): run until it exits, pass signals on to it.

The server runs in a session of its own (:func:`~ttlctl.server.process.launch`) on this
process's terminal. SIGINT, SIGTERM and SIGHUP sent to this process are passed on to
the server's whole process group (what a terminal's Ctrl-C does to ``vllm serve``); a
second one kills the group. The handlers are in place before the server starts, so a
signal that comes while it starts is passed on as soon as it exists. When the server
has exited, what is left of its group (an EngineCore that outlived it) gets SIGTERM,
then SIGKILL after a grace period.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Mapping, Sequence
from types import FrameType

from ttlctl.server.process import group_alive, launch, signal_group, stop_group

#: the signals passed on to the server
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: seconds the server's process group gets to exit after the server itself did
GRACE_S = 10.0


def run_foreground(command: Sequence[str], env: Mapping[str, str], grace_s: float = GRACE_S) -> int:
    """Run the server until it exits, passing signals on; its exit status (a signal's
    death as the shell reports it: 128 + the signal's number)."""
    received: list[int] = []
    group: list[int] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        if group:
            signal_group(group[0], signum if len(received) == 1 else signal.SIGKILL)

    previous = {s: signal.signal(s, forward) for s in FORWARDED}
    proc: subprocess.Popen[bytes] | None = None
    try:
        proc = launch(command, env)
        group.append(proc.pid)
        if received:  # a signal came while the server was being started
            signal_group(proc.pid, received[0])
        code = proc.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, signal.SIG_DFL if handler is None else handler)
        if proc is not None and group_alive(proc.pid):  # what the server left behind
            stop_group(proc, grace_s)
    if code < 0:  # killed by a signal: the shell's convention
        return 128 - code
    return code
