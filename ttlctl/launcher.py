"""The ``ttlctl`` console script: the command line, or one line saying what to install.

``pip install ttlctl`` is the serving image's install: the vLLM plugin and the bundle,
standard library only. The command line needs ``typer`` and ``rich`` (``ttlctl[serve]``:
``serve`` and the ``bundle`` commands), and most commands the trainer's packages
(``ttlctl[train]``). Without them the script prints what to install on one line and
exits with 2, instead of a traceback.
"""

from __future__ import annotations

import importlib.util
import sys

#: what the command line itself imports
CLI_PACKAGES = ("typer", "rich")
#: the trainer's packages (the ``train`` extra): imported by the commands that use them
TRAINER_PACKAGES = (*CLI_PACKAGES, "polars", "numpy", "scipy", "matplotlib", "optuna", "sqlalchemy")
#: the pip argument that brings them
TRAIN = "pip install 'ttlctl[train]'"


def _refuse(message: str) -> None:
    sys.stderr.write(f"error: {message}\n")  # as every user error: one line, exit 2
    raise SystemExit(2)


def main() -> None:
    missing = [name for name in CLI_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        _refuse(
            f"the ttlctl command needs {' and '.join(missing)}, not installed here (this is "
            f"the serving install: the vLLM plugin only): {TRAIN} for every command, or "
            "'ttlctl[serve]' for serve and the bundle commands"
        )
    # the command line (typer, rich) only once they are known to be there
    from ttlctl.cli import main as cli_main

    try:
        cli_main()
    except ModuleNotFoundError as exc:
        package = (exc.name or "").partition(".")[0]
        if package not in TRAINER_PACKAGES:
            raise
        command = " ".join(sys.argv[1:2]) or "this command"
        _refuse(f"{command} needs the trainer's packages ({package} is not installed): {TRAIN}")
