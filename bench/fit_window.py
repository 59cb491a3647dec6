"""Bring a canonical trace into a small model's window: ``ttlctl synth --max-context`` for
any trace (an ingested real one, too).

Each program's token counts (prompt, output, reused prefix) are multiplied by one factor,
the program's own, so that its largest call (prompt + output) fits in ``--max-context``
tokens; programs that already fit are left as they are. A scaled call keeps at least 4
output tokens; a reused prefix never exceeds its prompt or the previous call's prompt +
output; a null reused prefix (the canonical default) stays null. Pauses, tools, turns
and arrivals are kept as recorded. What it changes: every context is shorter by the
program's factor (a rebuild costs less, a pinned context holds fewer blocks), so the
trace keeps its shape — turns, pauses, the growth of each context relative to its
largest — not its absolute sizes. (``replay.fit_context.fit_context``.)

    python3 bench/fit_window.py real.parquet --max-context 1900 -o real-1900.parquet
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from replay.fit_context import fit_context  # noqa: E402
from ttlctl.trace import io as trace_io  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", type=Path, help="canonical trace (Parquet)")
    parser.add_argument("--max-context", type=int, required=True, help="tokens per call")
    parser.add_argument("-o", "--output", type=Path, required=True, help="trace to write")
    args = parser.parse_args(argv)
    frame = trace_io.read(args.trace).sort("program_id", "turn")
    scaled = fit_context(frame, args.max_context)
    rows = trace_io.write(scaled.lazy(), args.output)
    print(f"wrote {rows:,} calls, scaled to {args.max_context:,} tokens, to {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
