"""What every command shares: the two consoles, user errors as one line with exit 2,
warnings, the progress bar and ``--json`` output."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

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
from rich.table import Column

from ttlctl.cli.misplaced import misplaced
from ttlctl.errors import TtlctlError

try:  # typer 0.29 on carries its own copy of click, whose errors its commands raise
    from typer._click import ClickException as ClickException
except ImportError:  # pragma: no cover - older typer runs on click itself
    from click import ClickException as ClickException  # type: ignore[assignment,no-redef]
from ttlctl.jsonio import OutputError, check_folder, check_writable, write_json
from ttlctl.pathname import TOO_LONG, name_too_long

#: results for people (tables); machine output is written to sys.stdout directly
out = Console(soft_wrap=True)
#: progress, notes and errors
err = Console(stderr=True, soft_wrap=True)

#: the width of what is written to a file or a pipe without ``COLUMNS``: as wide as a
#: table needs (tables take their natural width; rich would squeeze them to 80)
PIPE_WIDTH = 1_000
for _console in (out, err):
    if not _console.is_terminal and not os.environ.get("COLUMNS", "").isdigit():
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
    file that is missing, unreadable or a directory, or whose path the system refuses for
    its length (:mod:`ttlctl.pathname`: an input, pathlib's ``is_file`` and the like
    raise on it wherever it is read; outputs are refused so by :func:`check_outputs`)."""
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
    except OSError as exc:
        if not name_too_long(exc) or exc.filename is None:
            raise
        fail(f"{exc.filename}: cannot read ({TOO_LONG})")


def print_warning(message: str) -> None:
    """A library's warning as one line on stderr (the libraries take a ``warn`` callback)."""
    err.print(f"[yellow]warning:[/] {escape(message)}", highlight=False)


def progress_bar(label: str) -> Progress:
    """The commands' progress bar on stderr: label, bar, n of total, elapsed, detail. Only
    on a terminal: elsewhere rich draws nothing but ends with an empty line, which would put
    a blank line above the command's messages (and its one-line error) in a pipe or a log.
    The label, the count and the time are never cut; the bar and the detail share the
    width left (the detail cut with an ellipsis on a narrow terminal)."""
    return Progress(
        TextColumn(f"[bold]{label}", table_column=Column(no_wrap=True)),
        BarColumn(bar_width=None, table_column=Column(ratio=1)),
        MofNCompleteColumn(table_column=Column(no_wrap=True)),
        TimeElapsedColumn(table_column=Column(no_wrap=True)),
        TextColumn(
            "{task.description}",
            table_column=Column(ratio=1, no_wrap=True, overflow="ellipsis"),
        ),
        console=err,
        transient=True,
        disable=not err.is_terminal,
        expand=True,
    )


def once(say: Callable[[str], None]) -> Callable[[str], None]:
    """``say`` each distinct message once (a live study repeats the same server warnings)."""
    seen: set[str] = set()

    def emit(message: str) -> None:
        if message not in seen:
            seen.add(message)
            say(message)

    return emit


def write_doc(doc: Any, to: Path, *, as_text: bool = False) -> bool:
    """``--json TO``: the document on stdout when ``TO`` is '-' (True: print nothing else),
    else written to the file (keys sorted, one-space indent). ``as_text``: values JSON has
    no type for (paths) written as text."""
    if str(to) == "-":
        text = json.dumps(doc, indent=1, sort_keys=True, default=str if as_text else None)
        sys.stdout.write(text + "\n")
        return True
    write_json(json.loads(json.dumps(doc, default=str)) if as_text else doc, to)
    return False


def usage_line(exc: ClickException) -> str:
    """A usage error (missing option, bad value, unknown command) as one line naming the
    command and where its help is, instead of typer's box; an option of another command
    says which commands take it (:func:`~ttlctl.cli.misplaced.misplaced`), not click's
    nearest spelling of this one's."""
    message = " ".join((misplaced(exc) or exc.format_message()).split()).rstrip(".")
    ctx = getattr(exc, "ctx", None)
    if ctx is None:
        return f"error: {message}"
    path = ctx.command_path
    return f"error: {path}: {message[:1].lower()}{message[1:]} (see `{path} --help`)"


#: why '-' is refused where an output is a file (:func:`check_outputs`)
STDOUT_REFUSED = (
    "-: this output is a file, not standard output (- means stdout only where the flag "
    "says so, as --json - does); give a file's path"
)
#: '-' given for an output folder: see :data:`STDOUT_REFUSED`
FOLDER_REFUSED = (
    "-: this output is a folder, not standard output (- means stdout only where the flag "
    "says so, as --json - does); give a folder's path"
)


#: the formats ttlctl writes its files in, each with the suffixes that name it
FORMATS: dict[str, tuple[str, ...]] = {
    "Parquet": (".parquet", ".pq"),
    "JSON": (".json",),
    "JSONL": (".jsonl", ".ndjson"),
    "HTML": (".html", ".htm"),
    # written by none of ttlctl's commands: named only to refuse an output called so
    "CSV": (".csv", ".tsv"),
    "YAML": (".yaml", ".yml"),
}


def check_format(path: Path | None, written: str, flag: str = "-o") -> None:
    """Refuse an output file whose suffix names another format than the one it is written
    in (``written``, a key of :data:`FORMATS`): ``-o trace.jsonl`` would get Parquet, and
    the next command to read it by its name would fail on it. A suffix that names no
    format, or none, is left alone (None: not asked for)."""
    if path is None:
        return
    suffix = path.suffix.lower()
    if suffix in FORMATS[written]:
        return
    for name, suffixes in FORMATS.items():
        if suffix in suffixes:
            raise OutputError(
                f"{flag} {path}: this is written as {written}, but its name says {name} "
                f"(name it {path.with_suffix(FORMATS[written][0]).name})"
            )


def check_outputs(
    *files: Path | None,
    streams: tuple[Path | None, ...] = (),
    folders: tuple[Path | None, ...] = (),
    inputs: tuple[Path | None, ...] = (),
) -> None:
    """Refuse, before the work starts, output files and folders that cannot be written
    (None: not asked for; a named pipe or a device: see :func:`~ttlctl.jsonio.landing`),
    and an output file that is one of the command's ``inputs`` (writing it would destroy
    what the command reads). ``files`` are written as files, so '-' is refused there
    (:data:`STDOUT_REFUSED`): it would be a file named '-' in the current folder, reported
    as written "to -"; ``streams`` (``--json PATH|-``) take '-' for stdout; ``folders``
    refuse '-' too (:data:`FOLDER_REFUSED`). Every command that writes calls it first."""
    if any(path is not None and str(path) == "-" for path in files):
        raise OutputError(STDOUT_REFUSED)
    if any(folder is not None and str(folder) == "-" for folder in folders):
        raise OutputError(FOLDER_REFUSED)
    read = {path.resolve() for path in inputs if path is not None and path.is_file()}
    for path in (*files, *streams):
        if path is not None and str(path) != "-":
            check_writable(path)  # first: a link that loops is refused, not resolved
            if path.resolve() in read:
                raise OutputError(
                    f"{path}: is an input of this command; writing it would destroy it "
                    "(give another path)"
                )
    for folder in folders:
        if folder is not None:
            check_folder(folder)
    refuse_repeats((*files, *streams, *folders))


def same_path(a: Path, b: Path) -> bool:
    """Whether two paths name one file (resolved: a link and its target are one)."""
    return a.resolve() == b.resolve()


def refuse_repeats(outputs: tuple[Path | None, ...]) -> None:
    """Refuse one path named for two outputs: the second write would replace the first
    (None: not asked for; '-': stdout)."""
    seen: set[Path] = set()
    for path in outputs:
        if path is None or str(path) == "-":
            continue
        where = path.resolve()  # as the inputs are compared: a link and its target are one
        if where in seen:
            raise OutputError(f"{path}: named for two outputs; give each its own path")
        seen.add(where)


def given(ctx: typer.Context, **values: Any) -> dict[str, Any]:
    """Each value as given on the command line (or its environment variable), None where the
    option was left at its default: for options whose default a trace or log may set (the
    engine's size, from an engine log's facts)."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        source = ctx.get_parameter_source(name)  # click's ParameterSource (typer vendors it)
        out[name] = None if source is None or source.name == "DEFAULT" else value
    return out
