"""A vLLM server ttlctl starts for itself and stops when done: :class:`OwnedServer`.

Started in a session of its own (:func:`~ttlctl.server.process.launch`), its output
in a log file; ready when ``/health`` answers 200. From :meth:`OwnedServer.start` to
:meth:`OwnedServer.stop` SIGTERM and SIGHUP unwind the owner's stack
(:mod:`ttlctl.server.signals`), so an owner that stops its server in a ``finally`` (or
a ``with`` block) stops it on Ctrl-C, SIGTERM, SIGHUP, an error or a timeout alike:
the API server, its EngineCore and every other process of its group.
"""

from __future__ import annotations

import re
import subprocess
import time
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from ttlctl.server import signals
from ttlctl.server.client import ServerError
from ttlctl.server.process import launch, stop_group, wait_healthy

#: seconds a server gets between SIGTERM and SIGKILL
STOP_GRACE_S = 15.0
#: a Python exception's own line, after whatever a process puts before it
#: (``[rank0]: ``, ``(EngineCore pid=7) ``): ``ValueError: To serve at least one request …``
_RAISED = re.compile(r"(?:^|[\s:\]\)])((?:\w+\.)*\w*(?:Error|Exception): .*)$")


class ServerStartError(ServerError):
    """The server exited, or was not healthy in time: one line, ending with its log's last."""


class OwnedServer:
    """One server: ``command`` run with ``env``, output to ``log_path``, reached at ``url``
    (any process that answers ``/health``: vLLM's server, vLLM's router).

    Attributes once started: ``ready_s`` (seconds from start to a healthy server) and
    ``pid`` (the API server's, which is also its process group's id).
    """

    def __init__(
        self,
        command: Sequence[str],
        env: dict[str, str],
        log_path: Path,
        url: str,
        *,
        cwd: Path | None = None,
        startup_timeout_s: float = 600.0,
        stop_grace_s: float = STOP_GRACE_S,
        name: str = "the server",
    ) -> None:
        self.command = list(command)
        self.env = env
        self.log_path = log_path
        self.url = url
        self.cwd = cwd
        self.startup_timeout_s = startup_timeout_s
        self.stop_grace_s = stop_grace_s
        #: how errors name it ("the server", "replica 2", "vllm-router")
        self.name = name
        self.ready_s: float | None = None
        self._t0 = 0.0
        self._proc: subprocess.Popen[bytes] | None = None
        self._holding = False

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def port(self) -> int | None:
        """The port of its URL (None: the URL names none)."""
        return urllib.parse.urlsplit(self.url).port

    def exited(self) -> str | None:
        """None while the started process runs; else one line: how it ended and its log's
        last (a server that answered its health check may still exit: a router whose
        port another server held heard that server answer for it, then failed to bind)."""
        code = self._proc.poll() if self._proc is not None else None
        if code is None:
            return None
        return f"{self.name} exited with code {code} (log: {self.log_path}): {self.log_tail()}"

    def start(self) -> str:
        """Start the server and wait until it is healthy; its URL.

        Raises :class:`ServerStartError` (the server is stopped first).
        """
        self.launch()
        return self.wait_ready()

    def launch(self) -> None:
        """Start the process without waiting for it (:meth:`wait_ready` waits): several
        servers started at once start side by side."""
        if self._proc is not None:
            raise RuntimeError("server already started")
        self._holding = signals.hold()
        self._t0 = time.monotonic()
        try:
            with signals.deferred():  # no signal between the start and the handle kept
                self._proc = launch(self.command, self.env, log=self.log_path, cwd=self.cwd)
        except BaseException:
            self.stop()
            raise

    def wait_ready(self) -> str:
        """Wait until the launched server is healthy; its URL (:class:`ServerStartError`:
        it exited or was not healthy in time; it is stopped first)."""
        if self._proc is None:
            raise RuntimeError("server not launched")
        try:
            problem = wait_healthy(self._proc, self.url, self._t0 + self.startup_timeout_s)
            if problem is not None:
                raise ServerStartError(
                    f"{self.name} {problem} (log: {self.log_path}): {self.log_tail()}"
                )
        except BaseException:
            self.stop()
            raise
        self.ready_s = time.monotonic() - self._t0
        return self.url

    def stop(self) -> None:
        """Stop the whole process group (SIGTERM, then SIGKILL after ``stop_grace_s``)."""
        proc, self._proc = self._proc, None
        try:
            if proc is not None:
                stop_group(proc, self.stop_grace_s)
        finally:
            if self._holding:
                self._holding = False
                signals.release()

    def log_tail(self, lines: int = 1) -> str:
        """The last ``lines`` lines of the log; one line: :func:`failure_line` of the log,
        cut to 300 characters."""
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        if not text:
            return "(empty log)"
        if lines == 1:
            return failure_line(text)[:300]
        return "\n".join(text[-lines:])

    def __enter__(self) -> OwnedServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


#: what vLLM's exceptions say when they point to a root cause logged before them
POINTS_BACK = ("see root cause above", "see stack trace for root cause")


def failure_line(lines: Sequence[str]) -> str:
    """The line of a log that says why its process stopped: the last exception raised
    (``ValueError: …``, less what the process put before it; not one that points to a
    root cause elsewhere in the log), else the last line. A process that dies of an exception
    often logs more after it (a ``resource_tracker`` warning as vLLM exits), and the last
    line would name only that."""
    raised = [m.group(1) for m in map(_RAISED.search, lines) if m]
    # vLLM's API server ends with "RuntimeError: Engine core initialization failed. See
    # root cause above.", its engine core with "Exception: WorkerProc initialization failed
    # … See stack trace for root cause.": the cause is the exception before them
    causes = [r for r in raised if not any(p in r.lower() for p in POINTS_BACK)]
    return (causes or raised or lines)[-1]
