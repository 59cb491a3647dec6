"""``ttlctl ingest``: agent logs → one canonical trace, and its summary."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import Progress

from ttlctl.cli import render
from ttlctl.cli.kit import (
    check_format,
    check_outputs,
    err,
    out,
    progress_bar,
    user_errors,
    write_doc,
)
from ttlctl.cli.options import AllowEmpty, InputFormat, JsonTo


def _file_progress() -> tuple[Progress, Callable[[Path, int, int], None]]:
    progress = progress_bar("reading")
    task = progress.add_task("", total=None)

    def update(path: Path, done: int, total: int) -> None:
        progress.update(task, completed=done, total=total, description=path.name)

    return progress, update


def ingest(
    paths: Annotated[
        list[Path], typer.Argument(help="Log files or directories (read recursively).")
    ],
    output: Annotated[
        Path, typer.Option("-o", "--output", help="Canonical trace to write (Parquet).")
    ],
    fmt: InputFormat = "auto",
    skip_bad: Annotated[
        bool,
        typer.Option(
            "--skip-bad",
            help="Write bad records to <output>.rejects.jsonl with a reason and go on, "
            "instead of stopping at the first one.",
        ),
    ] = False,
    allow_empty: AllowEmpty = False,
    json_out: JsonTo = None,
) -> None:
    """Read agent logs into one canonical trace (one row per LLM call) and summarise it.

    Without --skip-bad the first bad record stops the run: exit 2, naming the file and
    record, and nothing is written. An empty file, or nothing to write (every record
    rejected), stops it too, unless --allow-empty.
    """
    # imported when the command runs: `ttlctl --help` and the light commands stay light
    from ttlctl.ingest.pipeline import ingest as run_ingest
    from ttlctl.ingest.pipeline import rejects_path_for
    from ttlctl.trace import io as trace_io
    from ttlctl.trace.summary import summarize

    with user_errors():
        check_outputs(
            output,
            rejects_path_for(output) if skip_bad else None,
            streams=(json_out,),
            inputs=tuple(paths),
        )
        check_format(output, "Parquet")
        check_format(json_out, "JSON", "--json")
        progress, update = _file_progress()
        with progress:
            report = run_ingest(
                paths,
                output,
                fmt=fmt,
                skip_bad=skip_bad,
                progress=update,
                allow_empty=allow_empty,
                also_written=() if json_out is None or str(json_out) == "-" else (json_out,),
            )
        summary = summarize(trace_io.scan(output, checked=False))
    if json_out is not None:
        payload: dict[str, Any] = {"ingest": asdict(report), "summary": summary}
        with user_errors():
            if write_doc(payload, json_out, as_text=True):
                return
    render.ingest_report(err, report)
    render.trace_summary(out, summary, title=output.name)
