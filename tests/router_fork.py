"""Run as a script by the Python of the installed ``vllm-router``: imports its launcher once,
then starts the router once per argument list, each in a child forked from here, and prints
(JSON) what each wrote until it said one of the words it was watched for.

A start of the console script spends most of its half second importing the launcher
(FastAPI, aiohttp); the child runs the same ``main`` the script runs, on the same
``sys.argv``, so its parser and its Rust config validation are the installed router's.
Stdlib only: it runs in whatever environment the router was installed into.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable


def said(text: str, until: list[str]) -> str | None:
    """``text`` up to the end of its first whole line holding one of ``until``, or None."""
    start = 0
    while (end := text.find("\n", start)) >= 0:
        if any(word in text[start:end] for word in until):
            return text[: end + 1]
        start = end + 1
    return None


#: an argument that each start replaces by a port free just then
FREE_PORT = "{free_port}"


def free_ports(argv: list[str], given: set[int]) -> list[str]:
    """``argv`` with each :data:`FREE_PORT` a TCP port on 127.0.0.1 free a moment ago, not
    one given before (a port found in the batch's first seconds may be taken by its end)."""
    out = []
    held = []
    try:
        for arg in argv:
            while arg == FREE_PORT:
                held.append(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
                held[-1].bind(("127.0.0.1", 0))
                port = int(held[-1].getsockname()[1])
                if port not in given:
                    given.add(port)
                    arg = str(port)
            out.append(arg)
    finally:
        for sock in held:
            sock.close()
    return out


def start(main: Callable[[], object], argv: list[str], merge_stderr: bool) -> tuple[int, int]:
    """Fork a child that runs the router's ``main`` with ``argv``, its stdout (and stderr
    when ``merge_stderr``, else nowhere) on a pipe; the child's pid and the pipe's end."""
    read, write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        os.close(write)
        return pid, read
    code = 1
    try:
        os.close(read)
        os.dup2(write, 1)
        os.dup2(write if merge_stderr else os.open(os.devnull, os.O_WRONLY), 2)
        sys.argv = ["vllm-router", *argv]
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def watch(
    main: Callable[[], object],
    argv: list[str],
    merge_stderr: bool,
    until: list[str],
    timeout_s: float,
) -> str:
    """What the router started with ``argv`` wrote up to its first line holding one of
    ``until`` (or all it wrote before it exited or ``timeout_s`` ran out); then it is killed."""
    pid, read = start(main, argv, merge_stderr)
    seen = b""
    deadline = time.monotonic() + timeout_s
    try:
        while said(seen.decode(errors="replace"), until) is None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([read], [], [], left)[0]:
                break
            chunk = os.read(read, 65536)
            if not chunk:
                break
            seen += chunk
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read)
    text = seen.decode(errors="replace")
    return said(text, until) or text


def run() -> None:
    job = json.load(sys.stdin)
    from vllm_router.launch_router import main

    given: set[int] = set()
    out = [
        watch(main, free_ports(argv, given), job["merge_stderr"], job["until"], job["timeout_s"])
        for argv in job["runs"]
    ]
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    run()
