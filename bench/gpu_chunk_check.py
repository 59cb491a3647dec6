"""The prepared GPU check of a chunked rebuild's price, without vLLM: a context prefilled in
one pass and in chunks (each chunk attending to the KV the earlier ones left, as vLLM's
chunked prefill does), timed through eager transformers, against what the shipped profile
charges for each (:meth:`profiles.schema.Profile.rebuild_prefill_s`: one step's fixed cost
per chunk, the attention over earlier chunks in the increments).

One command on a GPU machine, from the repo root (needs torch and transformers)::

    python3 bench/gpu_chunk_check.py [--shipped llama-3.1-8b-h200]

Llama-3.1-8B with random bf16 weights; 16k, 32k and 64k tokens in one pass, in 8,192-token
chunks (vLLM's default step budget on a GPU) and, below 64k, in 2,048-token ones; each the
median of 3 after a warm-up. The ratio (shipped / measured) should not move with the
chunking: if it does, the price of a chunked rebuild is off by that much. Not run yet (the
GPU lent on 2026-12-04 was gone before it could be). ``--dry-run`` runs it on the CPU with
the tiny model, against ``tiny-cpu``, to check the script, not the figures.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from profiles.models import PRESETS  # noqa: E402
from profiles.profile_read import load  # noqa: E402
from profiles.torch_setup import hf_config  # noqa: E402

#: (context, its chunk sizes): one pass (the context itself) first
PLAN: tuple[tuple[int, tuple[int, ...]], ...] = (
    (16384, (16384, 8192, 2048)),
    (32768, (32768, 8192, 2048)),
    (65536, (65536, 8192)),
)
DRY_PLAN: tuple[tuple[int, tuple[int, ...]], ...] = ((512, (512, 256, 128)), (1024, (1024, 256)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shipped", default="llama-3.1-8b-h200")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dry-run", action="store_true", help="the tiny model on the CPU")
    args = parser.parse_args()
    import torch
    import transformers

    model, shipped_name, plan, cuda = "llama-3.1-8b", args.shipped, PLAN, True
    if args.dry_run:
        model, shipped_name, plan, cuda = "tiny", "tiny-cpu", DRY_PLAN, False
    if cuda and not torch.cuda.is_available():
        sys.exit("gpu_chunk_check: no CUDA GPU here (--dry-run runs it on the CPU)")
    dev = torch.device("cuda" if cuda else "cpu")
    config = PRESETS[model]
    torch.manual_seed(0)
    with torch.device(dev):
        net = transformers.AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]
            hf_config(config), dtype=torch.bfloat16 if cuda else torch.float32
        )
    net.eval()
    shipped = load(REPO / "profiles" / "data" / f"{shipped_name}.json")
    vocab = int(config["vocab_size"])

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def prefill(total: int, chunk: int) -> float:
        ids = torch.randint(0, vocab, (1, total), device=dev)
        cache: Any = transformers.DynamicCache()
        sync()
        start = time.perf_counter()
        for s in range(0, total, chunk):
            net(input_ids=ids[:, s : s + chunk], past_key_values=cache, logits_to_keep=1)
        sync()
        seconds = time.perf_counter() - start
        del cache
        if cuda:
            torch.cuda.empty_cache()
        return seconds

    name = torch.cuda.get_device_name(dev) if cuda else "cpu"
    print(f"{name}; torch {torch.__version__}, transformers {transformers.__version__}; {model}")
    print(f"{'context':>8} {'chunk':>6} {'measured s':>11} {'shipped s':>10} {'ratio':>6}")
    with torch.inference_mode():
        first = plan[0][0]
        prefill(first, first)  # warm-up: the first passes pay one-off costs
        prefill(first, plan[0][1][-1])
        for total, chunks in plan:
            for chunk in chunks:
                seconds = statistics.median(prefill(total, chunk) for _ in range(args.repeats))
                price = shipped.rebuild_prefill_s(total, None if chunk == total else chunk)
                print(
                    f"{total:>8} {chunk:>6} {seconds:>11.4f} {price:>10.4f} "
                    f"{price / seconds:>6.2f}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
