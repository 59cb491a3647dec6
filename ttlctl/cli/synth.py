"""``ttlctl synth``: a synthetic trace with the paper's per-program statistics (replay/synth.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ttlctl.cli.kit import check_format, check_outputs, out, user_errors
from ttlctl.nouns import counted


def synth(
    workload: Annotated[
        str,
        typer.Option(
            "--workload",
            help="swe-bench (10.9 ± 2.1 turns, tools 925 ± 3,550 ms, 70k ± 20k tokens) or "
            "bfcl (6.3 ± 2.3 turns, 1,923 ± 2,133 ms, 93k ± 69k tokens).",
        ),
    ],
    programs: Annotated[int, typer.Option("--programs", help="Agent programs to draw.")],
    output: Annotated[
        Path, typer.Option("-o", "--output", help="Canonical trace to write (Parquet).")
    ],
    seed: Annotated[int, typer.Option("--seed", help="Seed (same seed, same trace).")] = 0,
    max_context: Annotated[
        int | None,
        typer.Option(
            "--max-context",
            help="Scale each program's tokens so its largest call fits in this many tokens "
            "(small models and small KV caches, e.g. 1900 for a 2,048-token window).",
        ),
    ] = None,
) -> None:
    """Draw agent programs with the Continuum paper's per-program statistics.

    Program starts are left to the replay (--jps or --concurrency): every program's
    first call arrives at 0. --programs more than the machine's free memory (or a
    container's limit) can build is refused before any is drawn.
    """
    # imported when the command runs: `ttlctl --help` and the light commands stay light
    from profiles import host
    from replay.fit_context import fit_context, programs_over
    from replay.synth import synth as draw
    from replay.synth_memory import check_fits
    from ttlctl.trace import io as trace_io

    with user_errors():
        check_outputs(output)
        check_format(output, "Parquet")
        # the machine's free memory, read here once: the library compares, and reads nothing
        check_fits(workload, programs, host.available_bytes(), scaled=max_context is not None)
        frame = draw(workload, programs, seed)
        scaled = ""
        if max_context is not None:
            over = programs_over(frame, max_context)
            frame = fit_context(frame, max_context)
            # only the programs with a longer call are scaled: say how many
            scaled = (
                f", {counted(over, 'program')} scaled to {max_context:,} tokens"
                if over
                else f", none scaled: every call within {max_context:,} tokens"
            )
        rows = trace_io.write(frame.lazy(), output)
    out.print(
        f"wrote {counted(rows, 'call')} of {counted(programs, f'{workload} program')} "
        f"(seed {seed}{scaled}) "
        f"to {output}",
        highlight=False,
        markup=False,
    )
