"""``ttlctl export``: a canonical trace → Mooncake JSONL for other replayers."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ttlctl.cli.kit import check_format, check_outputs, err, user_errors
from ttlctl.nouns import counted


def export(
    trace: Annotated[Path, typer.Argument(help="Canonical trace (Parquet).")],
    to: Annotated[str, typer.Option("--to", help="mooncake or agentic-mooncake.")],
    output: Annotated[Path, typer.Option("-o", "--output", help="JSONL to write.")],
    # --trace-block-size: Dynamo's name for the same number, where vLLM's --block-size is
    # the KV cache's (16), not the trace's
    block_size: Annotated[
        int,
        typer.Option(
            "--block-size",
            "--trace-block-size",
            help="Tokens per hash_ids block (Mooncake 512, Weka 64), not vLLM's KV block size.",
        ),
    ] = 512,
) -> None:
    """Write the trace as Mooncake JSONL (or Dynamo's agentic Mooncake) for other replayers."""
    # imported when the command runs: `ttlctl --help` and the light commands stay light
    from ttlctl import export as export_mod
    from ttlctl.trace import io as trace_io

    with user_errors():
        export_mod.check(to, block_size)
        check_outputs(output, inputs=(trace,))
        check_format(output, "JSONL")
        frame = trace_io.read(trace)
        lines = export_mod.rows(frame, to, block_size)
        export_mod.write(lines, output)
    err.print(f"wrote {counted(len(lines), 'call')} to {output} ({to}, {block_size}-token blocks)")
