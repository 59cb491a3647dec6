"""A child process started as a terminal's foreground command would be: SIGHUP, SIGINT and
SIGTERM at their defaults (``preexec_fn`` of the tests that signal a ttlctl process).

ttlctl leaves a signal that it inherits ignored ignored (``nohup ttlctl validate …``), and
a test suite started under ``nohup`` or as a background job hands SIGHUP (and SIGINT) down
ignored: the tests that check what ttlctl does on those signals give their child the
defaults instead, whatever started the suite."""

from __future__ import annotations

import signal


def terminal_defaults() -> None:
    for signum in (signal.SIGHUP, signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)
