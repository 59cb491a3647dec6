"""An option given to a command that does not take it while another ttlctl command does
(``tune --pin-queue-bound``, a replay-only router flag; ``validate --worker-urls``): the
usage error names the commands that take it.

Click answers an unknown option with its closest spellings among the command's own options
("Possible options: --live-bundle"), which for a flag of another command is often a
different flag altogether: the slip is the command, not the spelling. Those of click's
suggestions that are near spellings of the option (:data:`NEAR`: ``--seeds`` for ``refit
--seed``, where ``--seed`` is another command's) are kept before the commands that take
it. An option no command takes keeps click's answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from difflib import SequenceMatcher
from typing import Any

try:  # typer 0.29 on carries its own copy of click, whose errors its commands raise
    from typer._click.exceptions import NoSuchOption as NoSuchOption
except ImportError:  # pragma: no cover - older typer runs on click itself
    from click.exceptions import NoSuchOption as NoSuchOption  # type: ignore[assignment,no-redef]


#: how alike (difflib's ratio) a suggestion of click's must be to the option to be kept:
#: ``--seeds`` for ``--seed`` (0.92), ``--timeout-seconds`` for ``--live-timeout-seconds``
#: (0.87), not ``--live-bundle`` for ``--pin-queue-bound`` (0.6)
NEAR = 0.8


def _leaves(group: Any, path: str) -> Iterator[tuple[str, Any]]:
    """Each command under ``group`` (subgroups' included) with its full command path."""
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            yield from _leaves(command, f"{path} {name}")
        else:
            yield f"{path} {name}", command


def _takes(command: Any, option: str) -> bool:
    """Whether ``command`` has ``option`` (either spelling of a ``--x/--no-x`` flag) among
    the options its help shows."""
    return any(
        param.param_type_name == "option"
        and not getattr(param, "hidden", False)
        and option in (*param.opts, *param.secondary_opts)
        for param in command.params
    )


def _listed(paths: list[str]) -> str:
    quoted = [f"`{p}`" for p in paths]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} and {quoted[-1]}"


def misplaced(exc: Exception) -> str | None:
    """The message of a "no such option" error whose option other ttlctl commands take:
    ``no such option: --x; --x is an option of `ttlctl replay``` (None: another error, or an
    option no other command takes)."""
    if not isinstance(exc, NoSuchOption) or exc.ctx is None:
        return None
    root = exc.ctx.find_root()
    option = exc.option_name
    owners = [
        path
        for path, command in _leaves(root.command, root.command_path)
        if command is not exc.ctx.command and _takes(command, option)
    ]
    if not owners:
        return None
    near = sorted(p for p in exc.possibilities or () if _alike(option, p) >= NEAR)
    suggest = f" (Possible options: {', '.join(near)})" if near else ""
    return f"no such option: {option}{suggest}; {option} is an option of {_listed(owners)}"


def _alike(option: str, other: str) -> float:
    return SequenceMatcher(None, option, other).ratio()
