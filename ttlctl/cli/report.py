"""``ttlctl report``: a run directory → one self-contained HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ttlctl.cli.kit import check_format, check_outputs, err, print_warning, user_errors
from ttlctl.cli.options import EngineBudget


def report(
    run_dir: Annotated[
        Path,
        typer.Argument(
            help="Run directory holding any of trace.parquet, fit.json, bundle.json (or "
            "another bundle with its summary, as tune -o writes them: b2.json and "
            "b2.tune.json), replay.json, tune.json."
        ),
    ],
    output: Annotated[Path, typer.Option("-o", "--output", help="HTML page to write.")],
    bundle: Annotated[
        str | None,
        typer.Option(
            "--bundle",
            help="The bundle of RUN_DIR to report (its file name, e.g. b2.json), shown "
            "with its tune summary (b2.tune.json); default bundle.json, needed when "
            "RUN_DIR holds several bundles and no bundle.json.",
        ),
    ] = None,
    max_num_batched_tokens: EngineBudget = None,
) -> None:
    """Write one HTML page: trace, per-tool CDFs with τ*, JCT per policy, pins, tuning.

    The page is self-contained (plots embedded, no script, nothing loaded from the
    network); every missing input is a note in the page. One page shows one bundle:
    bundle.json when the folder holds one (a warning names any other beside it), else a
    bundle tune wrote under another name (b2.json, beside its b2.tune.json); --bundle
    chooses, and a folder of several bundles but no bundle.json is refused without it. The τ*
    shown price a miss as `ttlctl bundle inspect` does: in steps of
    --max-num-batched-tokens when given.
    """
    # imported when the command runs: `ttlctl --help` and the light commands stay light
    from ttlctl import report as report_mod

    with user_errors():
        names = report_mod.names(run_dir, bundle)
        check_outputs(output, inputs=tuple(run_dir / name for name in names.values()))
        check_format(output, "HTML")
        with err.status("building the report…"):
            run = report_mod.load(run_dir, max_num_batched_tokens, bundle)
            page = report_mod.render(run)
        report_mod.write_html(page, output)
    others = [name for name in report_mod.bundles(run_dir) if name != run.names["bundle.json"]]
    if bundle is None and others:  # bundle.json, as ever; the others are said, not hidden
        print_warning(
            f"{run_dir} also holds {', '.join(others)}: this page shows bundle.json; "
            f"--bundle {others[0]} shows {'that one' if len(others) == 1 else 'another'}"
        )
    for role, problem in (run.problems | run.set_aside).items():  # on the page; said here too
        print_warning(f"{run.names[role]} not used: {problem}")
    for role, caveat in run.caveats.items():
        print_warning(f"{run.names[role]} {caveat}")
    missing = [
        name
        for role, name in run.names.items()
        if role not in run.paths and role not in run.problems
    ]
    note = f" (not in this run: {', '.join(missing)})" if missing else ""
    err.print(f"wrote {output}{note}", markup=False, highlight=False)
