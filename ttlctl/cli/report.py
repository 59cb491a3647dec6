"""``ttlctl report``: a run directory → one self-contained HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ttlctl.cli.kit import check_outputs, err, user_errors
from ttlctl.cli.options import EngineBudget


def report(
    run_dir: Annotated[
        Path,
        typer.Argument(
            help="Run directory holding any of trace.parquet, fit.json, bundle.json, "
            "replay.json, tune.json."
        ),
    ],
    output: Annotated[Path, typer.Option("-o", "--output", help="HTML page to write.")],
    max_num_batched_tokens: EngineBudget = None,
) -> None:
    """Write one HTML page: trace, per-tool CDFs with τ*, JCT per policy, pins, tuning.

    The page is self-contained (plots embedded, no script, nothing loaded from the
    network); every missing input is a note in the page. The τ* shown price a miss as
    `ttlctl bundle inspect` does: in steps of --max-num-batched-tokens when given.
    """
    # imported when the command runs: `ttlctl --help` and the light commands stay light
    from ttlctl import report as report_mod

    with user_errors():
        check_outputs(output)
        with err.status("building the report…"):
            page = report_mod.build_report(run_dir, max_num_batched_tokens)
        report_mod.write_html(page, output)
    missing = [name for name in report_mod.FILES if not (run_dir / name).is_file()]
    note = f" (not in this run: {', '.join(missing)})" if missing else ""
    err.print(f"wrote {output}{note}", markup=False, highlight=False)
