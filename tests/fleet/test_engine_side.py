"""Replicas' own account of a live run beside the simulator's (validation.engine_side)."""

from __future__ import annotations

from typing import Any

import pytest

from replay.validation.engine_metrics import (
    DECODE_COUNT,
    DECODE_SUM,
    PREFILL_COUNT,
    PREFILL_SUM,
    QUEUE_COUNT,
    QUEUE_SUM,
    STEPS,
    TTFT_COUNT,
    TTFT_SUM,
    ScrapeFailed,
    engine_delta,
    scrape,
)
from replay.validation.engine_side import beside_routed, pooled_engines
from ttlctl.server import prom
from ttlctl.server.process import free_port

# what a vLLM 0.32 replica's /metrics holds for these histograms (trimmed)
METRICS = """\
# HELP vllm:iteration_tokens_total Histogram of number of tokens per engine_step.
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_bucket{engine="0",le="1.0",model_name="m"} 120.0
vllm:iteration_tokens_total_bucket{engine="0",le="+Inf",model_name="m"} 222.0
vllm:iteration_tokens_total_count{engine="0",model_name="m"} 222.0
vllm:iteration_tokens_total_sum{engine="0",model_name="m"} 13901.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 46.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 46.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 12.709
vllm:request_queue_time_seconds_count{engine="0",model_name="m"} 46.0
vllm:request_queue_time_seconds_sum{engine="0",model_name="m"} 0.674
vllm:request_prefill_time_seconds_count{engine="0",model_name="m"} 46.0
vllm:request_prefill_time_seconds_sum{engine="0",model_name="m"} 8.694
vllm:request_decode_time_seconds_count{engine="0",model_name="m"} 46.0
vllm:request_decode_time_seconds_sum{engine="0",model_name="m"} 31.25
"""


def _values(text: str) -> dict[str, float]:
    values = prom.parse_metrics(text)
    keys = (STEPS, TTFT_SUM, TTFT_COUNT, QUEUE_SUM, QUEUE_COUNT, PREFILL_SUM, PREFILL_COUNT)
    keys += (DECODE_SUM, DECODE_COUNT)
    return {k: values[k] for k in keys if k in values}


def test_delta_reads_steps_ttft_queue_prefill_and_decode_from_the_histograms() -> None:
    # a request before the run
    before = {STEPS: 2.0, TTFT_SUM: 0.5, TTFT_COUNT: 1.0, QUEUE_SUM: 0.074, QUEUE_COUNT: 1.0}
    before |= {PREFILL_SUM: 0.694, PREFILL_COUNT: 1.0, DECODE_SUM: 1.25, DECODE_COUNT: 1.0}
    got = engine_delta(before, _values(METRICS))
    assert got is not None
    assert got["engine_steps"] == 220 and got["requests"] == 45
    assert got["ttft_sum_s"] == pytest.approx(12.209)
    assert got["ttft_mean_s"] == pytest.approx(12.209 / 45)
    assert got["queue_mean_s"] == pytest.approx(0.6 / 45)
    assert got["prefill_mean_s"] == pytest.approx(8.0 / 45)
    assert got["decode_mean_s"] == pytest.approx(30.0 / 45)
    # buckets are not steps: only the histogram's count is
    assert _values(METRICS)[STEPS] == 222.0


def test_delta_without_requests_without_the_optional_series_and_without_a_side() -> None:
    same = {k: v for k, v in _values(METRICS).items() if k in (STEPS, TTFT_SUM, TTFT_COUNT)}
    got = engine_delta(same, same)
    assert got == {
        "engine_steps": 0,
        "requests": 0,
        "ttft_sum_s": 0.0,
        "ttft_mean_s": None,
        "queue_mean_s": None,
        "prefill_mean_s": None,
        "decode_mean_s": None,
    }
    assert engine_delta(None, same) is None and engine_delta(same, None) is None


def test_scrape_of_a_replica_that_does_not_answer_names_it() -> None:
    port = free_port()  # a port nothing listens on
    url = f"http://127.0.0.1:{port}"
    with pytest.raises(ScrapeFailed, match=str(port)):
        scrape(url)


def _sim_replica(
    index: int, calls: int, steps: int, ttft: float | None, queue: float | None = None
) -> dict[str, Any]:
    prefill = None if ttft is None or queue is None else ttft - queue
    return {
        "replica": index,
        "llm_calls": calls,
        "engine_steps": steps,
        "ttft_mean_s": ttft,
        "scheduler_queue_mean_s": queue,
        "prefill_mean_s": prefill,
        "decode_mean_s": None if ttft is None else 4 * ttft,
    }


def _live(
    requests: int, steps: int, ttft: float | None, queue: float | None = None
) -> dict[str, Any]:
    # the engine core's parts do not add up to the API server's TTFT (two clocks)
    prefill = None if ttft is None or queue is None else 0.9 * ttft - queue
    return {
        "engine_steps": steps,
        "requests": requests,
        "ttft_mean_s": ttft,
        "queue_mean_s": queue,
        "prefill_mean_s": prefill,
        "decode_mean_s": None if ttft is None else 5 * ttft,
    }


LOGGED = {("p", 0): "r3", ("p", 1): "r2", ("q", 0): "r3"}
ROUTED: Any = {"per_replica": [_sim_replica(0, 1, 9, 0.2, 0.05), _sim_replica(1, 2, 11, 0.3, 0.1)]}


def test_beside_routed_numbers_the_replicas_as_the_as_logged_router_does() -> None:
    # every call reached r2 or r3: the as-logged router numbers them 0 and 1 (sorted)
    live = {"r1": _live(0, 0, None), "r2": _live(1, 10, 0.25), "r3": _live(2, 10, 0.4)}
    got = beside_routed(live, ROUTED, LOGGED)
    assert got is not None
    assert got["r2"]["engine_steps"] == {"live": 10, "sim": 9, "error": pytest.approx(-0.1)}
    assert got["r3"]["engine_steps"]["sim"] == 11
    assert got["r3"]["ttft_mean_s"]["error"] == pytest.approx(0.3 / 0.4 - 1)
    # the TTFT's parts: the live replica gave none here; the simulated ones are kept
    assert got["r3"]["queue_mean_s"] == {"live": None, "sim": 0.1, "error": None}
    assert got["r2"]["prefill_mean_s"]["sim"] == pytest.approx(0.15)
    # the decode after the first token, on both sides (r3: 4 x 0.3 s against 5 x 0.4 s)
    assert got["r3"]["decode_mean_s"]["sim"] == pytest.approx(1.2)
    assert got["r3"]["decode_mean_s"]["error"] == pytest.approx(1.2 / 2.0 - 1)
    # a replica no call reached took no simulated step either
    assert got["r1"]["llm_calls"] == {"live": 0, "sim": 0}
    assert got["r1"]["engine_steps"] == {"live": 0, "sim": 0, "error": None}
    assert got["r1"]["ttft_mean_s"] == {"live": None, "sim": None, "error": None}
    # a side missing: nothing compared
    assert beside_routed({**live, "r1": None}, ROUTED, LOGGED) is None
    assert beside_routed(live, None, LOGGED) is None
    assert beside_routed(live, ROUTED, None) is None


def test_an_idle_replica_keeps_the_pooled_figures() -> None:
    live = {
        "r1": _live(0, 0, None),
        "r2": _live(1, 10, 0.25, 0.05),
        "r3": _live(2, 10, 0.4, 0.1),
    }
    run = beside_routed(live, ROUTED, LOGGED)
    got = pooled_engines([run, run])
    assert got is not None
    assert got["engine_steps"] == {"live": 40, "sim": 40, "error": 0.0}
    assert got["ttft_mean_s"]["live"] == pytest.approx((0.25 + 2 * 0.4) / 3)
    # each part weighted by the requests of its side: live (1 × 0.05 + 2 × 0.1) / 3,
    # simulated r2 (sim replica 0: 1 call, 0.05) and r3 (replica 1: 2 calls, 0.1)
    queue = got["queue_mean_s"]
    assert queue["live"] == pytest.approx(0.25 / 3)
    assert queue["sim"] == pytest.approx(0.25 / 3)
    assert queue["error"] == pytest.approx(0.0)
    prefill = got["prefill_mean_s"]
    assert prefill["live"] == pytest.approx((0.9 * 0.25 - 0.05 + 2 * (0.9 * 0.4 - 0.1)) / 3)
    assert prefill["sim"] == pytest.approx((0.15 + 2 * 0.2) / 3)


def test_steps_not_comparable_keep_their_counts_without_an_error() -> None:
    live = {"r2": _live(1, 10, 0.25), "r3": _live(2, 10, 0.4)}
    run = beside_routed(live, ROUTED, LOGGED, steps_comparable=False)
    assert run is not None and run["r2"]["engine_steps"] == {"live": 10, "sim": 9, "error": None}
    got = pooled_engines([run, beside_routed(live, ROUTED, LOGGED)])
    assert got is not None and got["steps_comparable"] is False
    assert got["engine_steps"] == {"live": 40, "sim": 40, "error": None}
    assert got["ttft_mean_s"]["error"] is not None


def test_pooled_engines_sums_steps_and_weights_times_by_requests() -> None:
    run_a = {
        "r1": {
            "llm_calls": {"live": 1, "sim": 1},
            "engine_steps": {"live": 10, "sim": 12, "error": 0.2},
            "ttft_mean_s": {"live": 1.0, "sim": 0.5, "error": -0.5},
            "queue_mean_s": {"live": 0.1, "sim": 0.05, "error": -0.5},
            "prefill_mean_s": {"live": 0.5, "sim": 0.4, "error": -0.2},
        },
        "r2": {
            "llm_calls": {"live": 3, "sim": 3},
            "engine_steps": {"live": 30, "sim": 28, "error": None},
            "ttft_mean_s": {"live": 0.2, "sim": 0.3, "error": None},
            "queue_mean_s": {"live": 0.02, "sim": 0.01, "error": -0.5},
            "prefill_mean_s": {"live": 0.1, "sim": None, "error": None},
        },
    }
    got = pooled_engines([run_a, run_a])
    assert got is not None and got["runs"] == 2 and got["steps_comparable"] is True
    assert got["engine_steps"] == {"live": 80, "sim": 80, "error": 0.0}
    # (1 × 1.0 + 3 × 0.2) / 4 live, (1 × 0.5 + 3 × 0.3) / 4 simulated
    assert got["ttft_mean_s"]["live"] == pytest.approx(0.4)
    assert got["ttft_mean_s"]["sim"] == pytest.approx(0.35)
    assert got["ttft_mean_s"]["error"] == pytest.approx(0.35 / 0.4 - 1)
    assert got["queue_mean_s"]["live"] == pytest.approx((0.1 + 3 * 0.02) / 4)
    assert got["queue_mean_s"]["sim"] == pytest.approx((0.05 + 3 * 0.01) / 4)
    assert got["queue_mean_s"]["error"] == pytest.approx(0.08 / 0.16 - 1)
    assert got["prefill_mean_s"]["live"] == pytest.approx((0.5 + 3 * 0.1) / 4)
    # a replica with calls and no simulated part: no pooled part on that side
    assert got["prefill_mean_s"]["sim"] is None and got["prefill_mean_s"]["error"] is None
    assert pooled_engines([run_a, None]) is None and pooled_engines([]) is None
