"""The environment of a ``ttlctl`` subprocess run on a terminal or in a pipe.

Rich decides at import whether its consoles draw (a bar only on a terminal), so the tests of
the progress bars run the command in a real process: ``TTY_COMPATIBLE=1`` is rich's switch
for a terminal; without it, and with no ``COLUMNS`` of the test runner's own, the command
sees a pipe."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def cli_env(*, terminal: bool, columns: int | None = None) -> dict[str, str]:
    """This process's environment for a ``ttlctl`` subprocess run from the repository: on a
    terminal (``terminal``, ``columns`` wide when given) or in a pipe."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TTY_COMPATIBLE")}
    env["PYTHONPATH"] = str(REPO)
    if terminal:
        env["TTY_COMPATIBLE"] = "1"
        if columns is not None:
            env["COLUMNS"] = str(columns)
    return env
