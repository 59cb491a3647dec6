"""Timing a model in eager torch on its device (:mod:`profiles.measure_torch`): one prefill,
one decode step (:class:`Bench`), each the median of many runs (:func:`timed`).

Every timing is the median of at least ``repeats`` runs after a warm-up; quick ones are
repeated until they fill :data:`MIN_TIMING_S`, so that other processes on a shared machine
move the median little. The device is synchronised around each run.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

DECODE_STEPS = 5
DECODE_MAX_STEPS = 32
#: quick measurements repeat until they fill this many seconds (median of many beats noise)
MIN_TIMING_S = 0.25
MAX_RUNS = 100


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def timed(
    fn: Callable[[], Any],
    sync: Callable[[], None],
    least: int,
    most: int = MAX_RUNS,
) -> tuple[float, int]:
    """(median seconds, runs) of ``fn`` over at least ``least`` runs.

    Quick runs are repeated until they fill :data:`MIN_TIMING_S` (at most
    ``most``): a median over many is robust to the noise of other processes.
    """
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < least or (time.perf_counter() - start < MIN_TIMING_S and len(times) < most):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return _median(times), len(times)


class Bench:
    """The model under test and how to time it on its device."""

    def __init__(self, torch: Any, model: Any, dev: Any, repeats: int, seed: int) -> None:
        self.torch = torch
        self.model = model
        self.dev = dev
        self.cuda = dev.type == "cuda"
        self.repeats = repeats
        self.vocab = int(model.config.vocab_size)
        self.gen = torch.Generator(device=dev).manual_seed(seed)

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.dev)

    def release(self) -> None:
        if self.cuda:
            self.torch.cuda.empty_cache()

    def ids(self, batch: int, tokens: int) -> Any:
        return self.torch.randint(
            0, self.vocab, (batch, tokens), generator=self.gen, device=self.dev
        )

    def forward(self, input_ids: Any, past: Any = None) -> Any:
        # logits for the last position only, as a serving engine computes them
        return self.model(
            input_ids=input_ids, past_key_values=past, use_cache=True, logits_to_keep=1
        )

    def prefill(self, tokens: int) -> float:
        """Median seconds of a prefill of ``tokens`` random tokens (after a warm-up)."""
        prompt = self.ids(1, tokens)
        self.forward(prompt)
        seconds, _ = timed(partial(self.forward, prompt), self.sync, self.repeats)
        return seconds

    def decode(self, batch: int, kv: int) -> tuple[float, float]:
        """(mean KV length timed, median seconds) of one decode step of ``batch`` sequences.

        Each step appends a token to the cache (transformers' DynamicCache grows in
        place), so the KV length reported is the mean over the timed steps.
        """
        prompt = self.ids(batch, kv)
        past = self.forward(prompt).past_key_values
        nxt = prompt[:, -1:]
        del prompt
        self.forward(nxt, past)  # warm-up step
        before = int(past.get_seq_length())
        seconds, runs = timed(
            partial(self.forward, nxt, past),
            self.sync,
            max(self.repeats, DECODE_STEPS),
            DECODE_MAX_STEPS,
        )
        after = int(past.get_seq_length())
        if after != before + runs:  # a cache that does not grow in place: count the steps
            after = before + runs
        return (before + after + 1) / 2, seconds
