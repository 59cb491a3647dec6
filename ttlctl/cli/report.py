"""``ttlctl report``: a run directory → one self-contained HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ttlctl.cli.kit import check_outputs, err, print_warning, user_errors
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
        check_outputs(output, inputs=tuple(run_dir / name for name in report_mod.FILES))
        with err.status("building the report…"):
            run = report_mod.load(run_dir, max_num_batched_tokens)
            page = report_mod.render(run)
        report_mod.write_html(page, output)
    for name, problem in (run.problems | run.set_aside).items():  # on the page; said here too
        print_warning(f"{name} not used: {problem}")
    missing = [name for name in report_mod.FILES if not (run_dir / name).is_file()]
    note = f" (not in this run: {', '.join(missing)})" if missing else ""
    err.print(f"wrote {output}{note}", markup=False, highlight=False)
