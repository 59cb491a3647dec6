"""ttlctl/server/foreground.py: ``ttlctl serve``'s server, run until it exits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ttlctl.server.foreground import run_foreground

REPO = Path(__file__).resolve().parents[2]


def _served(child: str) -> subprocess.Popen[bytes]:
    """``run_foreground`` in its own process running the Python ``child`` (which prints
    ``ready`` once its signal handling is set), read up to that line."""
    parent = (
        "import os, sys; from ttlctl.server.foreground import run_foreground; "
        f"sys.exit(run_foreground([sys.executable, '-c', {child!r}], dict(os.environ)))"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", parent],
        stdout=subprocess.PIPE,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"ready"
    return proc


def test_run_foreground_returns_the_exit_status() -> None:
    before = signal.getsignal(signal.SIGTERM)  # a session's server may hold it already
    assert run_foreground([sys.executable, "-c", "raise SystemExit(3)"], dict(os.environ)) == 3
    kill_self = "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"
    assert run_foreground([sys.executable, "-c", kill_self], dict(os.environ)) == 143
    assert signal.getsignal(signal.SIGTERM) == before  # put back


def test_run_foreground_forwards_sigterm_to_the_server() -> None:
    child = (
        "import signal, sys, time; "
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(7)); "
        "print('ready', flush=True); time.sleep(60)"
    )
    proc = _served(child)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 7
    assert time.monotonic() - t0 < 10


def test_a_second_signal_kills_a_server_that_ignores_the_first() -> None:
    """Ctrl-C twice: a server stuck in its shutdown (here: one that ignores SIGTERM) is
    killed by the second signal, not left to the grace period."""
    child = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)"
    )
    proc = _served(child)
    try:
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert proc.poll() is None  # the first is ignored
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 128 + signal.SIGKILL
        assert time.monotonic() - t0 < 10
    finally:
        if proc.poll() is None:  # a failure here leaves no ttlctl behind
            proc.kill()
            proc.wait()
