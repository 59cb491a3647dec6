"""The ``ttlctl`` command line: parse, call a library function, print. No logic here."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from ttlctl import __version__

app = typer.Typer(
    name="ttlctl",
    help="Train, tune and apply KV-cache time-to-live policies for LLM agents, from real traces.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


class UserError(Exception):
    """Bad input or arguments: printed as one line, exit code 2."""


def fail(message: str) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}", highlight=False, markup=True)
    raise typer.Exit(2)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn the library's input errors into one line on stderr and exit code 2."""
    from ttlctl.ingest.errors import IngestError
    from ttlctl.ingest.registry import UnknownFormat

    try:
        yield
    except (IngestError, UnknownFormat, UserError) as exc:
        fail(_escape(str(exc)))
    except PermissionError as exc:
        fail(_escape(f"{exc.filename}: permission denied"))
    except IsADirectoryError as exc:
        fail(_escape(f"{exc.filename}: is a directory"))


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _version(value: bool) -> None:
    if value:
        out.print(f"ttlctl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    """ttlctl: keep an agent's KV cache across its tool calls, for as long as it pays."""


def _file_progress() -> tuple[Progress, Callable[[Path, int, int], None]]:
    progress = Progress(
        TextColumn("[bold]reading"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=err,
        transient=True,
    )
    task = progress.add_task("", total=None)

    def update(path: Path, done: int, total: int) -> None:
        progress.update(task, completed=done, total=total, description=path.name)

    return progress, update


@app.command()
def ingest(
    paths: Annotated[
        list[Path], typer.Argument(help="Log files or directories (read recursively).")
    ],
    output: Annotated[
        Path, typer.Option("-o", "--output", help="Canonical trace to write (Parquet).")
    ],
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="Input format: auto (detect per file), canonical, engine-log, claude-code "
            "(alias weka), mini-swe-agent, swe-agent, litellm, mooncake, tracelab, "
            "trtllm-scaffolding.",
        ),
    ] = "auto",
    skip_bad: Annotated[
        bool,
        typer.Option(
            "--skip-bad",
            help="Write bad records to <output>.rejects.jsonl with a reason and go on, "
            "instead of stopping at the first one.",
        ),
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the summary as JSON on stdout (nothing else).")
    ] = False,
) -> None:
    """Read agent logs into one canonical trace (one row per LLM call) and summarise it.

    Without --skip-bad the first bad record stops the run: exit 2, naming the file and
    record, and nothing is written.
    """
    from ttlctl import render
    from ttlctl.ingest.pipeline import ingest as run_ingest
    from ttlctl.trace import io as trace_io
    from ttlctl.trace.summary import summarize

    with user_errors():
        progress, update = _file_progress()
        with progress:
            report = run_ingest(paths, output, fmt=fmt, skip_bad=skip_bad, progress=update)
        summary = summarize(trace_io.scan(output))
    if as_json:
        payload: dict[str, Any] = {"ingest": asdict(report), "summary": summary}
        sys.stdout.write(json.dumps(payload, indent=2, default=str) + "\n")
        return
    render.ingest_report(err, report)
    render.trace_summary(out, summary, title=output.name)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
