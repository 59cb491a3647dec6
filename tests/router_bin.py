"""Whether vLLM's router can run here: its command, or a skip with the reason."""

from __future__ import annotations

import functools
import json
import os
import shlex
import subprocess
import urllib.request
from pathlib import Path

import pytest

from tests.router_fork import FREE_PORT
from ttlctl.server import router
from ttlctl.server.owned import OwnedServer

__all__ = [
    "FREE_PORT",
    "router_help",
    "router_or_skip",
    "router_outputs",
    "send_session_call",
    "started_router",
]


def router_or_skip() -> str:
    """The ``vllm-router`` command; the test is skipped, saying why, where it cannot run."""
    return _router_or_skip()[0]


def router_help() -> str:
    """What ``vllm-router --help`` printed (skipped as :func:`router_or_skip` is)."""
    return _router_or_skip()[1]


def _router_or_skip() -> tuple[str, str]:
    command, text = _router_found()
    if command is None:
        pytest.skip(text)
    return command, text


@functools.cache
def _router_found() -> tuple[str | None, str]:
    """(the ``vllm-router`` command, its ``--help``) or (None, why it cannot run here):
    looked up once a session, as its ``--help`` takes half a second to start."""
    try:
        command = router.binary()
    except router.RouterError as exc:
        return None, str(exc)
    try:
        done = subprocess.run([command, "--help"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{command} cannot run here: {exc}"
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:]
        return None, f"{command} --help exited {done.returncode}: {' '.join(tail)}"
    return command, done.stdout.decode(errors="replace")


def started_router(command: list[str], port: int, log: Path, name: str) -> OwnedServer:
    """The real router run as ``command`` (listening on ``port``, its output in ``log``), to
    enter as a context: started once it answers, stopped, with what it started, on exit."""
    return OwnedServer(
        command,
        dict(os.environ),
        log,
        f"http://127.0.0.1:{port}",
        startup_timeout_s=60.0,
        name=f"vllm-router ({name})",
    )


def send_session_call(url: str, session: str, prompt: list[int], timeout_s: float) -> None:
    """One completion of one token for ``prompt`` through the router at ``url``, as a call
    of ``session`` (its ``X-Session-ID``); answered 200."""
    body = json.dumps({"model": "m", "prompt": prompt, "max_tokens": 1}).encode()
    request = urllib.request.Request(
        f"{url}/v1/completions",
        data=body,
        headers={"Content-Type": "application/json", "X-Session-ID": session},
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        assert response.status == 200


def router_outputs(
    command: str,
    runs: list[list[str]],
    *,
    merge_stderr: bool,
    until: list[str],
    timeout_s: float = 60,
) -> list[str]:
    """What ``command`` (the installed ``vllm-router``) writes on stdout (and stderr, when
    ``merge_stderr``) when started with each argument list of ``runs``, up to its first
    line holding one of ``until`` (``[""]``: its first line), or all it wrote before it
    exited or ``timeout_s`` ran out. An argument ``{free_port}`` is a port free at that
    start. The console script's Python imports the launcher once and forks a child per start
    (tests/router_fork.py): the same parser and Rust validation, without the half-second
    import each time."""
    job = {"runs": runs, "merge_stderr": merge_stderr, "until": until, "timeout_s": timeout_s}
    done = subprocess.run(
        [*_interpreter(command), str(Path(__file__).with_name("router_fork.py"))],
        input=json.dumps(job),
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.fail(f"tests/router_fork.py exited {done.returncode}: {done.stderr[-2000:]}")
    out: list[str] = json.loads(done.stdout)
    return out


#: how pip's ``/bin/sh`` launcher's second line starts (written where the interpreter's path
#: is too long for ``#!`` or holds a space): ``'''exec' PYTHON "$0" "$@"``
SH_EXEC = "'''exec' "


def _interpreter(command: str) -> list[str]:
    """The Python of the ``vllm-router`` console script ``command``: its ``#!`` line, or
    the ``exec`` line of pip's ``/bin/sh`` launcher (:data:`SH_EXEC`)."""
    with open(command, "rb") as script:
        first = script.readline().decode(errors="replace")
        second = script.readline().decode(errors="replace")
    if first.startswith("#!") and "python" in first:
        return shlex.split(first[2:])
    if first.strip() == "#!/bin/sh" and second.startswith(SH_EXEC):
        words = shlex.split(second.removeprefix(SH_EXEC))
        if words[-2:] == ["$0", "$@"]:
            return words[:-2]
    pytest.fail(f"{command} is not the Python console script of vllm_router: {first!r}")
