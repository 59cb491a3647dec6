"""The ``ttlctl`` command line: parse, call a library function, print. No logic here."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import Progress

from ttlctl import (
    __version__,
    bundle_cli,
    profile_cli,
    replay_cli,
    report_cli,
    serve_cli,
    synth_cli,
    tune_cli,
    validate_cli,
)
from ttlctl.clikit import err, out, progress_bar, user_errors

app = typer.Typer(
    name="ttlctl",
    help="Train, tune and apply KV-cache time-to-live policies for LLM agents, from real traces.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(bundle_cli.app, name="bundle")
app.command("profile")(profile_cli.profile)
app.command("replay")(replay_cli.replay)
app.command("report")(report_cli.report)
app.command("synth")(synth_cli.synth)
app.command("tune")(tune_cli.tune)
app.command("serve", context_settings=serve_cli.CONTEXT_SETTINGS)(serve_cli.serve)
app.command("validate", context_settings=validate_cli.CONTEXT_SETTINGS)(validate_cli.validate)


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
    progress = progress_bar("reading")
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


@app.command()
def fit(
    trace: Annotated[Path, typer.Argument(help="Canonical trace (Parquet) from `ttlctl ingest`.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="fit.json to write.")],
    min_samples: Annotated[
        int, typer.Option(help="K: a tool's own CDF is trusted with more than K records.")
    ] = 100,
    plot: Annotated[
        Path | None, typer.Option(help="Write one PNG per tool (CDF, exponential fit) here.")
    ] = None,
    abandon_s: Annotated[
        float, typer.Option(help="Pauses longer than this are abandoned programs, not tools.")
    ] = 3600.0,
    bootstrap: Annotated[int, typer.Option(help="Bootstrap resamples for η's interval.")] = 1000,
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap.")] = 0,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the fit as JSON on stdout.")
    ] = False,
) -> None:
    """Fit per-tool pause CDFs (compressed to ≤ 1,024 points), exponential fits, and η."""
    from fitting.fit import FitConfig, fit_trace
    from ttlctl import render
    from ttlctl.clikit import UserError
    from ttlctl.jsonio import write_atomic as write_json

    with user_errors():
        try:
            config = FitConfig(
                min_samples=min_samples, abandon_s=abandon_s, bootstrap=bootstrap, seed=seed
            )
        except ValueError as exc:
            raise UserError(str(exc)) from None
        with err.status("fitting…"):
            doc = fit_trace(trace, config)
        write_json(doc, output)
        plots = []
        if plot is not None:
            from fitting.plots import plot_fit

            with err.status("plotting…"):
                plots = plot_fit(doc, plot)
    if as_json:
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
        return
    render.fit_table(out, doc)
    err.print(f"wrote {output}" + (f" and {len(plots)} plot(s) in {plot}" if plot else ""))


@app.command()
def export(
    trace: Annotated[Path, typer.Argument(help="Canonical trace (Parquet).")],
    to: Annotated[str, typer.Option("--to", help="mooncake or agentic-mooncake.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="JSONL to write.")],
    block_size: Annotated[
        int, typer.Option(help="Tokens per hash_ids block (Mooncake 512, Weka 64).")
    ] = 512,
) -> None:
    """Write the trace as Mooncake JSONL (or Dynamo's agentic Mooncake) for other replayers."""
    from ttlctl import export as export_mod
    from ttlctl.clikit import UserError
    from ttlctl.trace import io as trace_io

    with user_errors():
        frame = trace_io.read(trace)
        try:
            lines = export_mod.rows(frame, to, block_size)
        except ValueError as exc:
            raise UserError(str(exc)) from None
        export_mod.write(lines, output)
    err.print(f"wrote {len(lines):,} calls to {output} ({to}, {block_size}-token blocks)")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
