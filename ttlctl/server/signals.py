"""SIGTERM and SIGHUP as an exception while ttlctl owns a server, so that it stops it.

Python turns Ctrl-C's SIGINT into ``KeyboardInterrupt``, which unwinds the stack
through every ``finally`` (the one that stops the server among them). SIGTERM (what
``kill``, a job scheduler or a container runtime sends) and SIGHUP (a closed
terminal) kill the process where it stands, and a server started in a session of its
own (:func:`ttlctl.server.process.launch`) would outlive it. While at least one
:func:`hold` is in force, both raise :class:`Terminated` instead: a ``SystemExit``
with the shell's status for the signal (128 + its number), so the stack unwinds, the
servers are stopped, and the process then exits as if the signal had ended it. A
second such signal is ignored until a holder's cleanup is done (the cleanup ends in
SIGKILL after its grace period anyway), and a signal that was ignored before
(``nohup``) stays ignored. The handlers in place before the first :func:`hold` are put
back by the last :func:`release`.

:func:`deferred` holds SIGINT, SIGTERM and SIGHUP back for a few statements that must
not be cut in two (a server started and its handle kept), then delivers them again.
Signal handlers can only be set from the main thread: elsewhere :func:`hold` and
:func:`deferred` do nothing (:func:`hold` returns False).
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

#: the signals turned into :class:`Terminated`
CAUGHT = (signal.SIGTERM, signal.SIGHUP)

Handler = Callable[[int, FrameType | None], Any] | int | None


class Terminated(SystemExit):
    """A SIGTERM or SIGHUP received while a server is owned (exit status 128 + signum)."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signum = signum


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holds = 0
        self.previous: dict[int, Handler] = {}
        self.raised = False


_state = _State()


def _raise(signum: int, frame: FrameType | None) -> None:
    if _state.raised:  # the first one's cleanup is under way: let it finish
        return
    _state.raised = True
    raise Terminated(signum)


def hold() -> bool:
    """Turn SIGTERM and SIGHUP into :class:`Terminated` until the matching :func:`release`.

    Holds nest. False (and nothing done) off the main thread.
    """
    if threading.current_thread() is not threading.main_thread():
        return False
    with _state.lock:
        if _state.holds == 0:
            # an ignored signal stays ignored (``nohup ttlctl validate …``)
            ignored = {s for s in CAUGHT if signal.getsignal(s) == signal.SIG_IGN}
            _state.previous = {s: signal.signal(s, _raise) for s in CAUGHT if s not in ignored}
            _state.raised = False
        _state.holds += 1
    return True


def release() -> None:
    """End one :func:`hold`; the last one puts the earlier handlers back."""
    with _state.lock:
        if _state.holds == 0:
            return
        _state.holds -= 1
        _state.raised = False  # a cleanup is done: the next signal counts again
        if _state.holds:
            return
        previous, _state.previous = _state.previous, {}
    for signum, handler in previous.items():
        signal.signal(signum, signal.SIG_DFL if handler is None else handler)


@contextmanager
def held() -> Iterator[None]:
    """:func:`hold` for the duration of a ``with`` block."""
    holding = hold()
    try:
        yield
    finally:
        if holding:
            release()


@contextmanager
def deferred() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP noted, not acted on, during the block; the first one
    noted is sent again at its end, to the handlers in place then."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []

    def note(signum: int, frame: FrameType | None) -> None:
        pending.append(signum)

    watched = [s for s in (signal.SIGINT, *CAUGHT) if signal.getsignal(s) != signal.SIG_IGN]
    previous = {s: signal.signal(s, note) for s in watched}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        if pending:
            os.kill(os.getpid(), pending[0])
