"""An option given to a command that does not take it while another ttlctl command does
(``tune --pin-queue-bound``, a replay-only router flag; ``validate --worker-urls``): the
usage error names the commands that take it.

Click answers an unknown option with its closest spelling among the command's own options
("Possible options: --live-bundle"), which for a flag of another command is a different
flag altogether: the slip is the command, not the spelling. An option no command takes
keeps click's answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

try:  # typer 0.29 on carries its own copy of click, whose errors its commands raise
    from typer._click.exceptions import NoSuchOption as NoSuchOption
except ImportError:  # pragma: no cover - older typer runs on click itself
    from click.exceptions import NoSuchOption as NoSuchOption  # type: ignore[assignment,no-redef]


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
    return f"no such option: {option}; {option} is an option of {_listed(owners)}"
