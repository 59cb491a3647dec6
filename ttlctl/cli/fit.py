"""``ttlctl fit``: a canonical trace → per-tool pause CDFs, exponential fits and η."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from ttlctl import __version__
from ttlctl.cli import render
from ttlctl.cli.kit import check_format, check_outputs, err, out, user_errors, write_doc
from ttlctl.cli.options import JsonTo
from ttlctl.jsonio import file_sha256, write_json


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
        float,
        typer.Option(
            "--abandon-seconds",
            help="Pauses longer than this (s) are abandoned programs, not tools.",
        ),
    ] = 3600.0,
    bootstrap: Annotated[int, typer.Option(help="Bootstrap resamples for η's interval.")] = 1000,
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap.")] = 0,
    allow_empty: Annotated[
        bool,
        typer.Option(
            "--allow-empty",
            help="Write a fit of nothing when the trace has no tool pause (every τ* left to "
            "the cold start) instead of stopping with an error.",
        ),
    ] = False,
    json_out: JsonTo = None,
) -> None:
    """Fit per-tool pause CDFs (compressed to ≤ 1,024 points), exponential fits, and η."""
    # imported when the command runs: `ttlctl --help` and the light commands stay light
    from fitting.fit import FitConfig, fit_trace
    from ttlctl.trace import io as trace_io

    with user_errors():
        check_outputs(output, streams=(json_out,), folders=(plot,), inputs=(trace,))
        check_format(output, "JSON")
        check_format(json_out, "JSON", "--json")
        config = FitConfig(
            min_samples=min_samples, abandon_s=abandon_s, bootstrap=bootstrap, seed=seed
        )
        frame = trace_io.scan(trace)
        with err.status("fitting…"):
            doc = fit_trace(
                frame,
                config,
                source={"path": str(trace), "sha256": file_sha256(trace)},
                created=datetime.now(UTC).isoformat(timespec="seconds"),
                ttlctl_version=__version__,
                allow_empty=allow_empty,
            )
        plots, wrote = [], f"wrote {output}"
        if plot is not None:
            # matplotlib: only when plots are asked for
            from ttlctl.plots import INDEX, plot_fit

            with err.status("plotting…"):
                plots = plot_fit(doc, plot)
            wrote += f" and {len(plots)} plot(s) in {plot} (each one's tool: {plot / INDEX})"
        write_json(doc, output)  # last: a fit.json is there only if all went well
        if json_out is not None and write_doc(doc, json_out):
            return
    render.fit_table(out, doc)
    err.print(wrote)
