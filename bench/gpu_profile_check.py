"""The prepared GPU check of the profiler: measure Llama-3.1-8B (random weights) on CUDA and
compare it with the shipped H200 roofline profile.

Run on a GPU machine from the repo root (needs torch, transformers, scipy, numpy; no
polars): ``python3 bench/gpu_profile_check.py --out $OUT``. Prints measured against
shipped prefill and reload figures and the ratio; writes the measured profile JSON.
A shipped figure off by more than 20% should be corrected from the measured one.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from profiles.measure_torch import measure
from profiles.models import PRESETS
from profiles.schema import load


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--max-context", type=int, default=32768)
    parser.add_argument("--shipped", default="llama-3.1-8b-h200")
    args = parser.parse_args()
    start = time.perf_counter()
    grid = [c for c in (1024, 2048, 4096, 8192, 16384, 32768) if c <= args.max_context]
    measured = measure(
        "llama-3.1-8b",
        PRESETS["llama-3.1-8b"],
        device="cuda",
        contexts=grid,
        repeats=5,
        progress=lambda s, d, t: print(f"{s} {d}/{t}", flush=True),
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "llama-3.1-8b-cuda.json").write_text(json.dumps(measured.to_json(), indent=1))
    shipped = load(
        Path(__file__).resolve().parents[1] / "profiles" / "data" / f"{args.shipped}.json"
    )
    print(f"device: {measured.device}; took {time.perf_counter() - start:.0f} s")
    print(f"{'context':>8} {'measured s':>11} {'shipped s':>10} {'shipped/measured':>17}")
    for tokens, seconds in measured.prefill.points:
        ship = shipped.prefill_s(tokens)
        print(f"{tokens:>8} {seconds:>11.4f} {ship:>10.4f} {ship / seconds:>17.2f}")
    for tokens in (1024, 8192, 32768):
        m, s = measured.reload_s(tokens), shipped.reload_s(tokens)
        print(
            f"reload {tokens:>6} tokens: measured {m * 1e3:.2f} ms, shipped {s * 1e3:.2f} ms, "
            f"ratio {s / m:.2f}"
        )
    print("decode:", measured.decode, "shipped:", shipped.decode)


if __name__ == "__main__":
    main()
