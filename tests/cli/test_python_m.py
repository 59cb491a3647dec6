"""``python -m ttlctl`` is the ``ttlctl`` command (the console script's entry point)."""

from __future__ import annotations

import subprocess
import sys

from ttlctl import __version__


def test_python_m_ttlctl_runs_the_command() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ttlctl", "--version"], capture_output=True, text=True, check=True
    )
    assert __version__ in out.stdout


def test_python_m_ttlctl_refuses_bad_input_as_the_command_does() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "ttlctl", "replay", "no-such-trace.parquet", "--policy", "vllm"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    assert "no-such-trace.parquet" in out.stderr
    assert "Traceback" not in out.stderr
