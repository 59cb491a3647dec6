"""Fresh replicas warmed before a live run (replay.validation.warmup)."""

from __future__ import annotations

import threading

import pytest

from replay.validation import warmup
from replay.validation.error import ValidateError
from replay.validation.warmup import LONGEST, PREFILL_OUTPUT, PREFILLS, lengths, warmed
from tests.fleet.test_neighbours import _replica
from tests.http_stub import serving
from ttlctl.server.process import free_port


def test_lengths_span_the_window_longest_first() -> None:
    got = lengths(2048)
    assert len(got) == PREFILLS and got == sorted(got, reverse=True)
    # the longest leaves room for its output tokens; the shortest is a twelfth of it
    assert got[0] + PREFILL_OUTPUT < 2048 and got[0] >= 2048 - PREFILL_OUTPUT - 1
    assert got[-1] == round(got[0] / PREFILLS)
    # 12 prompts of up to 2,045 tokens: about six windows of KV written in all
    assert sum(got) > 6 * 2048


def test_lengths_of_a_long_window_are_capped_and_of_a_tiny_one_stay_valid() -> None:
    assert max(lengths(131072)) <= LONGEST
    assert max(lengths(None)) < 2048
    tiny = lengths(64)
    assert all(n >= 16 and n + PREFILL_OUTPUT < 64 for n in tiny)


def test_a_replica_that_cannot_be_warmed_is_named() -> None:
    port = free_port()  # a port nothing listens on
    url = f"http://127.0.0.1:{port}"
    with pytest.raises(ValidateError, match=f"warming the replica at {url} up"):
        warmed([url], "m", max_model_len=256, vocab_size=1000, timeout_s=5.0)


def test_an_error_in_a_replicas_warm_up_is_raised_not_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def broken(url: str, *args: object) -> int:
        calls.append(url)
        if url.endswith(":2"):
            raise RuntimeError("a bug in the warm-up")
        return 22

    monkeypatch.setattr(warmup, "_warm_one", broken)
    with pytest.raises(RuntimeError, match="a bug in the warm-up"):
        warmed(["http://h:1", "http://h:2"], "m", max_model_len=256, vocab_size=1000)
    assert sorted(calls) == ["http://h:1", "http://h:2"]
    got = warmed(["http://h:1", "http://h:3"], "m", max_model_len=256, vocab_size=1000)
    assert got.requests == 22 and got.seconds >= 0


def test_the_requests_said_served_are_those_each_replica_answered() -> None:
    bodies: list[dict[str, object]] = []
    with serving(_replica(bodies, threading.Lock())) as url:
        got = warmed([url], "m", max_model_len=256, vocab_size=1000, timeout_s=30.0)
    assert got.requests == len(bodies) == len(lengths(256)) + 2 + warmup.BATCHES * warmup.BATCH
    assert all("logprobs" not in b for b in bodies)


def test_before_a_client_reading_logprobs_the_first_prefill_asks_for_them() -> None:
    """vLLM's first logprobs request pays a one-time cost: paid in the warm-up before a
    client tagging by its header alone (it reads its answers' ids from logprobs), once."""
    bodies: list[dict[str, object]] = []
    with serving(_replica(bodies, threading.Lock())) as url:
        got = warmed([url], "m", max_model_len=256, vocab_size=1000, timeout_s=30.0, logprobs=True)
    assert got.requests == len(bodies)
    assert [b.get("logprobs") for b in bodies] == [0] + [None] * (len(bodies) - 1)
