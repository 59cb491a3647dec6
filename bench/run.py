"""``make bench``: every benchmark, each printing ratios against a baseline from the same run.

Runs each of :data:`BENCHES` with its defaults, in turn (docs/benchmarks.md); a bench's
own options (fewer programs, ``--repeat``) are for running it alone.
"""

from __future__ import annotations

import argparse
import runpy
import sys
from pathlib import Path

BENCHES = [
    "ingest_bench.py",
    "policy_bench.py",
    "replay_bench.py",
    "shared_bench.py",
    "sched_overhead_bench.py",
    "tune_bench.py",
    "fleet_bench.py",
]

if __name__ == "__main__":
    argparse.ArgumentParser(
        description=__doc__, epilog="benchmarks: " + ", ".join(BENCHES)
    ).parse_args()
    here = Path(__file__).parent
    for name in BENCHES:
        print(f"== {name}", flush=True)
        sys.argv = [name]
        runpy.run_path(str(here / name), run_name="__main__")
