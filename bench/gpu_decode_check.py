"""The prepared GPU check of the shipped decode figures, without vLLM: the work of one decode
step of Llama-3.1-8B (random bf16 weights), replayed as CUDA graphs, against the shipped H200
roofline's decode (``step_s + per_seq_s·seqs + per_kv_token_s·KV``).

One command on a GPU machine, from the repo root (needs torch only)::

    python3 bench/gpu_decode_check.py

A decode step reads every weight once and each sequence's KV once. This times the two
apart, each captured in a CUDA graph so that no launch overhead is counted (vLLM also
replays its decode steps as CUDA graphs):

- **weights**: the step's matrix products, layer by layer (QKV, output, gate-up, down) and
  the LM head, over ``seqs`` rows, each layer's weights a buffer of its own (15 GB in all,
  far past the L2): against ``step_s + per_seq_s·seqs``;
- **attention**: one query token per sequence against its KV, every layer: the query
  heads that share a KV head go in as that head's rows of queries
  (``scaled_dot_product_attention`` over ``(seqs, kv_heads, heads/kv_heads, head_dim)``,
  no mask: the same sums as grouped-query decode): against ``per_kv_token_s·KV``. vLLM's
  paged decode kernels split long KV across the chip, which SDPA's one-token query may not
  do as well: a measured figure above the shipped one bounds it from above.

The norms, rotary embedding, activation and sampling are left out (small next to the reads).
``--dry-run`` runs the same code on the CPU with the tiny model (no graphs) against the
shipped ``tiny-cpu`` profile, to check the script, not the figures.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from profiles.models import PRESETS, head_dim  # noqa: E402
from profiles.profile_read import load  # noqa: E402
from profiles.schema import Profile  # noqa: E402

SEQS: tuple[int, ...] = (1, 8, 32, 128)
#: (sequences, KV tokens each) of the attention timings
ATTENTION: tuple[tuple[int, int], ...] = ((8, 1024), (8, 8192), (8, 32768), (32, 8192))


def timer(torch: Any, fn: Callable[[], Any], cuda: bool, runs: int) -> float:
    """Median seconds of ``fn`` (a replayed CUDA graph of it on a GPU)."""
    if cuda:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):  # warm-up off the capture, as graph capture asks
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        run: Callable[[], Any] = graph.replay
    else:
        run = fn
    run()
    times = []
    for _ in range(runs):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        run()
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shipped", default="llama-3.1-8b-h200")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--dry-run", action="store_true", help="the tiny model on the CPU")
    args = parser.parse_args()
    import torch

    model, shipped_name, cuda = "llama-3.1-8b", args.shipped, True
    seqs, attention = SEQS, ATTENTION
    if args.dry_run:
        model, shipped_name, cuda = "tiny", "tiny-cpu", False
        seqs, attention = (1, 8), ((2, 256), (2, 1024))
    if cuda and not torch.cuda.is_available():
        sys.exit("gpu_decode_check: no CUDA GPU here (--dry-run runs it on the CPU)")
    cfg = PRESETS[model]
    dev = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    hidden, inter = int(cfg["hidden_size"]), int(cfg["intermediate_size"])
    heads, kv_heads = int(cfg["num_attention_heads"]), int(cfg["num_key_value_heads"])
    d, layers, vocab = head_dim(cfg), int(cfg["num_hidden_layers"]), int(cfg["vocab_size"])
    shipped: Profile = load(REPO / "profiles" / "data" / f"{shipped_name}.json")
    torch.manual_seed(0)

    def weight(rows: int, cols: int) -> Any:
        return torch.randn(rows, cols, device=dev, dtype=dtype) * 0.02

    stack = [
        (
            weight(hidden, (heads + 2 * kv_heads) * d),
            weight(heads * d, hidden),
            weight(hidden, 2 * inter),
            weight(inter, hidden),
        )
        for _ in range(layers)
    ]
    head = weight(hidden, vocab)
    nbytes = sum(w.numel() * w.element_size() for ws in stack for w in ws)
    nbytes += head.numel() * head.element_size()
    name = torch.cuda.get_device_name(dev) if cuda else "cpu"
    print(f"{name}; torch {torch.__version__}; {model}: {nbytes / 1e9:.2f} GB of weights")

    print(f"{'seqs':>5} {'weights ms':>11} {'shipped ms':>11} {'ratio':>6} {'GB/s':>7}")
    for b in seqs:
        x0 = torch.randn(b, hidden, device=dev, dtype=dtype)

        def matmuls(x0: Any = x0) -> Any:
            x = x0
            for qkv, out, gate_up, down in stack:
                x = (x @ qkv)[:, : heads * d] @ out
                x = (x @ gate_up)[:, :inter] @ down
            return x @ head

        t = timer(torch, matmuls, cuda, args.runs)
        ship = shipped.decode.step_s + shipped.decode.per_seq_s * b
        print(
            f"{b:>5} {t * 1e3:>11.3f} {ship * 1e3:>11.3f} {ship / t:>6.2f} {nbytes / t / 1e9:>7.0f}"
        )
        del x0

    kv_bytes = 2 * layers * kv_heads * d * (2 if cuda else 4)
    print(f"{'seqs':>5} {'KV each':>8} {'attention ms':>13} {'shipped ms':>11} {'ratio':>6}")
    for b, n in attention:
        q = torch.randn(b, kv_heads, heads // kv_heads, d, device=dev, dtype=dtype)
        kv = [
            (
                torch.randn(b, kv_heads, n, d, device=dev, dtype=dtype),
                torch.randn(b, kv_heads, n, d, device=dev, dtype=dtype),
            )
            for _ in range(layers)
        ]

        def attend(q: Any = q, kv: Any = kv) -> Any:
            return [torch.nn.functional.scaled_dot_product_attention(q, k, v) for k, v in kv]

        t = timer(torch, attend, cuda, args.runs)
        ship = shipped.decode.per_kv_token_s * b * n
        rate = b * n * kv_bytes / t / 1e9
        print(
            f"{b:>5} {n:>8} {t * 1e3:>13.3f} {ship * 1e3:>11.3f} {ship / t:>6.2f}  "
            f"({rate:.0f} GB/s of KV)"
        )
        del q, kv, attend
        if cuda:
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
