"""Replicas kept busy while another one is measured: :func:`kept_busy`.

A fleet's replica is profiled alone (``validate --replicas`` without ``--profile``
measures the first one), but during the live replay its neighbours compute too: on a
machine whose replicas have CPUs of their own they still share the caches, the memory
bus and, under a hypervisor, maybe the physical cores; on GPUs of their own, the host's
CPUs that run each server's scheduler and API, and its PCIe links. So while the placed
replica is measured, each other replica serves a steady stream of completions: a prompt of fresh
random token ids (never a prefix hit, so it prefills) and a few output tokens, one
request after another, from a thread per replica, until the measurement ends.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from replay.validation.prompts import id_span, random_prompt
from ttlctl.server import client

#: the neighbours' requests: prompt tokens and output tokens of each
PROMPT_TOKENS = 512
OUTPUT_TOKENS = 32


@contextmanager
def kept_busy(
    urls: Sequence[str],
    model: str,
    *,
    vocab_size: int | None = None,
    prompt_tokens: int = PROMPT_TOKENS,
    output_tokens: int = OUTPUT_TOKENS,
    seed: int = 0,
) -> Iterator[list[int]]:
    """Each of ``urls`` serves one request after another while the block runs; yields
    the count of requests each has answered so far (a list, updated as they finish).
    A request that fails ends that replica's stream (the measurement sees the failure
    its own way)."""
    stop = threading.Event()
    done = [0] * len(urls)
    span = id_span(vocab_size)

    def serve(i: int, url: str) -> None:
        rng = random.Random(seed * 1000 + i)
        while not stop.is_set():
            body = {
                "model": model,
                "prompt": random_prompt(rng, prompt_tokens, span),
                "max_tokens": output_tokens,
                "ignore_eos": True,
            }
            try:
                client.json_answer(url, "/v1/completions", body, method="POST", timeout_s=120.0)
            except client.ServerError:
                return
            done[i] += 1

    threads = [
        threading.Thread(target=serve, args=(i, url), daemon=True) for i, url in enumerate(urls)
    ]
    for thread in threads:
        thread.start()
    try:
        yield done
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=150.0)
