"""Whether vLLM's router can run here: its command, or a skip with the reason."""

from __future__ import annotations

import subprocess

import pytest

from ttlctl.server import router


def router_or_skip() -> str:
    """The ``vllm-router`` command; the test is skipped, saying why, where it cannot run."""
    try:
        command = router.binary()
    except router.RouterError as exc:
        pytest.skip(str(exc))
    try:
        done = subprocess.run([command, "--help"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"{command} cannot run here: {exc}")
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:]
        pytest.skip(f"{command} --help exited {done.returncode}: {' '.join(tail)}")
    return command
