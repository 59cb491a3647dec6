"""What every command shares: the two consoles, and user errors as one line with exit 2."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from ttlctl.errors import TtlctlError

#: results for people (tables); machine output is written to sys.stdout directly
out = Console(soft_wrap=True)
#: progress, notes and errors
err = Console(stderr=True, soft_wrap=True)

#: tables written to a file or a pipe are not squeezed to 80 columns
PIPE_WIDTH = 140
for _console in (out, err):
    if not _console.is_terminal:
        _console.width = PIPE_WIDTH


class UserError(TtlctlError):
    """Bad arguments the command itself finds: printed as one line, exit code 2."""


def fail(message: str) -> NoReturn:
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    raise typer.Exit(2)


@contextmanager
def user_errors() -> Iterator[None]:
    """The one place a user's error becomes one line on stderr and exit code 2: every
    :class:`~ttlctl.errors.TtlctlError` (the libraries' and :class:`UserError`), and a
    file that is missing, unreadable or a directory."""
    try:
        yield
    except TtlctlError as exc:
        fail(str(exc))
    except PermissionError as exc:
        fail(f"{exc.filename}: permission denied")
    except IsADirectoryError as exc:
        fail(f"{exc.filename}: is a directory")
    except FileNotFoundError as exc:
        fail(f"{exc.filename}: no such file")


def print_warning(message: str) -> None:
    """A library's warning as one line on stderr (the libraries take a ``warn`` callback)."""
    err.print(f"[yellow]warning:[/] {escape(message)}", highlight=False)


def progress_bar(label: str) -> Progress:
    """The commands' progress bar on stderr: label, bar, n of total, elapsed, detail."""
    return Progress(
        TextColumn(f"[bold]{label}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=err,
        transient=True,
    )
