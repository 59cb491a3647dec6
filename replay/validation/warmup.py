"""Fresh replicas warmed before their live run: :func:`warmed`.

`validate --replicas` starts a fresh fleet for every live run, and a fresh vLLM server is
not yet at its pace: timed in-process on one pinned CPU (the 55M test model), the first
pass of 30 prefills of assorted lengths took 4% longer in all than the same prefills
again (single ones up to 20%), and once an engine had run 60 other prefills, new lengths
ran within 3% of their second pass. The profile that prices the simulator is measured on
a replica that has already served a live run, and a production replica has served for
hours: so before each live run every replica serves :data:`PREFILLS` prefills of fresh
random prompts whose lengths span its context window (about six windows' worth of
tokens in all), a prefill over a cached prefix, and batches of a few
requests decoding together. Before a live client that tags by its ``X-Session-ID`` header
alone (``--client-tags session``: it reads its answers' token ids from ``logprobs``,
:mod:`replay.client_tags`), the first prefill asks for its sampled tokens' logprobs: a vLLM
server's first such request pays a one-time cost (1.9 s against 0.04 s the next time on
the 55M test model; a run's first calls were up to 20 s late on two replicas without it).
The replicas warm at once, each from a worker thread of its own, and their prefix caches
are emptied afterwards by the caller, as before every live run.

A warm-up cannot run every step size: on the 55M test model in bfloat16, a length new to
the engine still cost 14–42 ms more than the same length again after 75 new lengths
(docs/results-log.md). That cost is priced instead (``Profile.new_shape``), and the simulator's
engines start having run the warm-up's sizes (:func:`warmed_engine`).

The requests go to each replica directly, without a session header: the router never
sees them, and the replicas' arrival files (:mod:`ttlctl.server.arrivals`) leave them
out of the live placement.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from replay.scheduler_config import SimSchedulerConfig
from replay.validation.error import ValidateError
from replay.validation.prompts import id_span, random_prompt
from ttlctl.server import client

#: fresh-prompt prefills each replica serves, lengths spread over its window
PREFILLS = 12
#: the longest warm-up prompt (a real-size model's window may be far longer)
LONGEST = 4096
#: requests that decode together in each warm-up batch, and the batches
BATCH = 4
BATCHES = 2
#: output tokens of the warm-up prefills and of each batched request
PREFILL_OUTPUT = 2
BATCH_OUTPUT = 16


@dataclass(frozen=True, slots=True)
class Warmed:
    """What the warm-up did: requests served per replica and how long it took."""

    requests: int
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"requests_per_replica": self.requests, "seconds": round(self.seconds, 3)}


def lengths(max_model_len: int | None) -> list[int]:
    """The warm-up prompts' lengths: :data:`PREFILLS` spread evenly up to the window less
    room for the output (capped at :data:`LONGEST`), longest first."""
    window = min(max_model_len or 2048, LONGEST + PREFILL_OUTPUT + 1)
    top = max(16, window - PREFILL_OUTPUT - 1)
    return sorted({max(16, round(top * (i + 1) / PREFILLS)) for i in range(PREFILLS)}, reverse=True)


def warmed_engine(engine: SimSchedulerConfig, max_model_len: int | None) -> SimSchedulerConfig:
    """``engine`` as a server started fresh and warmed has it: having run the warm-up's step
    sizes (:func:`warm_sizes`), each other size paying its cost the first time."""
    sizes = warm_sizes(max_model_len, engine.block_size, engine.max_num_batched_tokens)
    return replace(engine, sizes_run=sizes)


def warm_sizes(max_model_len: int | None, block_size: int, budget: int) -> frozenset[int]:
    """The step sizes (scheduled tokens) a replica's warm-up makes its engine run, as near
    as the requests tell (a batch's steps depend on when each of its requests joins):
    each prefill of :func:`lengths`, the new tokens of the prefill on a cached prefix,
    the short prompts prefilled one to :data:`BATCH` at a time, alone or beside the
    batch's decodes, and decode batches of 1 to :data:`BATCH`; a size above ``budget``
    (the engine's ``max_num_batched_tokens``) as its chunks (the budget, then the rest).
    The simulator's engines start having run these (``SimSchedulerConfig.sizes_run``):
    each other size pays the first time."""
    sizes = lengths(max_model_len)
    short = sizes[-1]
    base = sizes[len(sizes) // 2]
    prompt = base + min(64, short)
    cached = min(base // block_size, (prompt - 1) // block_size) * block_size
    made = set(sizes) | {prompt - cached} | set(range(1, BATCH + 1))
    for k in range(1, BATCH + 1):
        made |= {k * short + d for d in range(BATCH - k + 1)}
    # a prompt longer than the budget is prefilled in chunks of it, then the rest
    chunks = {budget for n in made if n > budget} | {n % budget for n in made if n > budget}
    return frozenset(n for n in made | chunks if 0 < n <= budget)


def _warm_one(
    url: str,
    model: str,
    sizes: Sequence[int],
    span: int,
    seed: int,
    timeout_s: float,
    logprobs: bool,
) -> int:
    """One replica's warm-up; the count of requests it served."""
    rng = random.Random(seed)

    def complete(prompt: list[int], max_tokens: int, with_logprobs: bool = False) -> None:
        body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True}
        if with_logprobs:
            body["logprobs"] = 0
        client.json_answer(url, "/v1/completions", body, method="POST", timeout_s=timeout_s)

    served = 0
    for i, n in enumerate(sizes):  # the first may ask for its tokens' logprobs (the module)
        complete(random_prompt(rng, n, span), PREFILL_OUTPUT, with_logprobs=logprobs and i == 0)
        served += 1
    # a prefill over a cached prefix: the prompt again with a few new tokens after it
    base = random_prompt(rng, sizes[len(sizes) // 2], span)
    complete(base, 1)
    complete(base + random_prompt(rng, min(64, sizes[-1]), span), PREFILL_OUTPUT)
    served += 2
    short = sizes[-1]
    for _ in range(BATCHES):
        prompts = [random_prompt(rng, short, span) for _ in range(BATCH)]
        with ThreadPoolExecutor(max_workers=BATCH) as pool:
            list(pool.map(lambda p: complete(p, BATCH_OUTPUT), prompts))
        served += BATCH
    return served


def warmed(
    urls: Sequence[str],
    model: str,
    *,
    max_model_len: int | None,
    vocab_size: int | None,
    seed: int = 0,
    timeout_s: float = 300.0,
    logprobs: bool = False,
) -> Warmed:
    """Warm every replica at ``urls`` at once (see the module); :class:`ValidateError`
    naming the replica if one fails (any error of its thread is raised here).
    ``logprobs``: the first prefill asks for its tokens' logprobs (a live client that
    reads its answers' ids from them follows)."""
    sizes = lengths(max_model_len)
    span = id_span(vocab_size)
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, len(urls))) as pool:
        futures = [
            pool.submit(_warm_one, url, model, sizes, span, seed * 1000 + i, timeout_s, logprobs)
            for i, url in enumerate(urls)
        ]
        counts: list[int] = []
        for url, future in zip(urls, futures, strict=True):
            try:
                counts.append(future.result())
            except client.ServerError as exc:
                raise ValidateError(f"warming the replica at {url} up: {exc}") from None
    return Warmed(min(counts) if counts else 0, time.perf_counter() - start)
