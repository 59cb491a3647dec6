"""The decode pace of a batch (profiles/decode_pace.py) and the fit's floor on it
(profiles/engine_fit.py): synthetic streams and synthetic ``/metrics`` text, no server."""

from __future__ import annotations

import dataclasses
import json
import warnings

import pytest

from profiles.decode_pace import (
    BURSTY_TOKENS_PER_BURST,
    FROM_SERVER,
    BatchPace,
    Stream,
    batch_pace,
    batch_paces,
    itl_delta,
    stream_paces,
)
from profiles.engine_fit import DECODE_FLOOR, check_decode_floor, fit_samples
from profiles.engine_timings import STREAM, DecodePoint, EngineFitError, samples_from_json
from profiles.fitmath import DecodeFit, QuadraticFit
from profiles.server_decode import decode_point, warn_streamed
from tests.profiles.engine_samples import SHAPES, samples
from ttlctl.server.prom import parse_metrics


def metrics(itl_sum: float, itl_count: int) -> dict[str, float]:
    """A vLLM ``/metrics`` page holding the inter-token latency histogram, parsed as the
    profiler parses it (buckets and a neighbouring histogram included: neither may count)."""
    labels = 'engine="0",model_name="tiny"'
    text = f"""# HELP vllm:inter_token_latency_seconds Histogram of inter-token latency in seconds.
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{{engine="0",le="0.01",model_name="tiny"}} {itl_count}.0
vllm:inter_token_latency_seconds_bucket{{engine="0",le="+Inf",model_name="tiny"}} {itl_count}.0
vllm:inter_token_latency_seconds_count{{{labels}}} {itl_count}.0
vllm:inter_token_latency_seconds_sum{{{labels}}} {itl_sum!r}
# TYPE vllm:request_time_per_output_token_seconds histogram
vllm:request_time_per_output_token_seconds_count{{{labels}}} 99.0
vllm:request_time_per_output_token_seconds_sum{{{labels}}} 1000.0
"""
    return parse_metrics(text)


def regular(start: float, tokens: int, step: float) -> Stream:
    """A stream whose tokens came one a step, ``step`` seconds apart."""
    return Stream(0.0, tuple((start + step * i, i + 1) for i in range(tokens)), None)


def bursty(start: float, tokens: int) -> Stream:
    """A stream held back: its first token, then the other ``tokens − 1`` 1 µs apart."""
    rest = tuple((start + 0.05 + 1e-6 * i, i + 2) for i in range(tokens - 1))
    return Stream(0.0, ((start, 1), *rest), None)


def test_batch_pace_leaves_out_the_peers_prefill() -> None:
    """A starts decoding while B still prefills (2 s); then both decode at 20 ms a
    token. The whole-stream pace of A would count B's prefill (~0.5 s a token); the
    batch pace reads only the window in which both decode."""
    a = Stream(0.0, ((0.1, 1), (0.2, 2), (2.2, 3), (2.22, 4), (2.24, 5), (2.26, 6)), None)
    b = Stream(0.0, ((2.2, 1), (2.22, 2), (2.24, 3), (2.26, 4), (2.28, 5)), None)
    assert a.tpot_s() == pytest.approx(0.515)
    assert batch_paces([a, b]) == [pytest.approx(0.02), pytest.approx(0.02)]
    # no window in which both decode: no figure rather than a wrong one
    c = Stream(0.0, ((3.0, 1), (3.1, 2), (3.2, 3)), None)
    assert batch_paces([a, c]) == []
    assert stream_paces([a, b]) == ([pytest.approx(0.02), pytest.approx(0.02)], True)
    # a frontend that delivers each stream in one burst (an engine far faster than
    # it): no common window, so each stream's own pace, and the fallback is reported
    early = Stream(0.0, (*((0.111, n) for n in range(1, 16)), (0.114, 16)), None)
    late = Stream(0.0, tuple((0.125 + 0.005 * i, i + 1) for i in range(16)), None)
    assert batch_paces([early, late]) == []
    assert stream_paces([early, late]) == (
        [pytest.approx(0.003 / 14), pytest.approx(0.005)],
        False,
    )
    assert stream_paces([a]) == ([pytest.approx(0.515)], True)


def test_two_tokens_a_burst_is_bursty() -> None:
    """Streams that brought ``BURSTY_TOKENS_PER_BURST`` tokens a burst on average (or more)
    were held back; fewer, they came token by token."""
    for per_burst, bursty in ((BURSTY_TOKENS_PER_BURST, True), (1.9, False)):
        assert BatchPace((0.01,), True, None, "", per_burst).bursty is bursty


def test_the_window_holds_the_chunk_that_opens_it() -> None:
    """The window runs from the last stream's second token to the first stream's end, both
    chunks in it: a stream with only those two chunks inside still has its pace."""
    steady = regular(0.0, 10, 0.01)  # 0.00 … 0.09
    late = Stream(0.0, ((0.05, 1), (0.06, 2), (0.09, 3), (0.2, 4)), None)
    assert batch_paces([steady, late]) == pytest.approx([0.01, 0.03])


def test_itl_delta_reads_the_histogram_sum_and_count() -> None:
    got = itl_delta(metrics(1.5, 200), metrics(1.5 + 0.06, 230))
    assert got is not None
    assert got[0] == pytest.approx(0.06) and got[1] == 30
    assert itl_delta({}, metrics(0.1, 3)) is None  # a server without the histogram
    assert itl_delta(metrics(0.1, 3), parse_metrics("vllm:num_requests_running 0\n")) is None


def test_bursty_streams_take_the_servers_pace() -> None:
    """Two streams of 16 tokens delivered in bursts (the loaded machine's case): their
    chunk times say 1 µs a token; the server counted their 30 intervals at 2 ms each."""
    streams = [bursty(0.1, 16), bursty(0.1005, 16)]
    paces, _ = stream_paces(streams)
    assert max(paces) < 1e-5  # what the streams alone would have priced decode at
    got = batch_pace(streams, itl_delta(metrics(4.0, 100), metrics(4.0 + 30 * 0.002, 130)))
    assert got.itl_s == pytest.approx(0.002) and got.note == ""
    assert got.bursty and got.tokens_per_burst == pytest.approx(14.0)
    assert got.stream == tuple(paces)  # the streams' figures are kept beside it


def test_regular_streams_agree_with_the_server() -> None:
    """Streams one token a step, 3 ms apart: not bursty, and their pace is the server's."""
    streams = [regular(0.1, 16, 0.003), regular(0.1004, 16, 0.003)]
    got = batch_pace(streams, itl_delta(metrics(0.0, 0), metrics(30 * 0.003, 30)))
    assert not got.bursty and got.tokens_per_burst == pytest.approx(1.0)
    assert got.windowed
    assert got.stream == (pytest.approx(0.003), pytest.approx(0.003))
    assert got.itl_s == pytest.approx(0.003)


def test_the_servers_pace_is_refused_when_it_is_not_this_batchs() -> None:
    streams = [regular(0.1, 16, 0.003), regular(0.1004, 16, 0.003)]
    missing = batch_pace(streams, None)
    assert missing.itl_s is None and "no vllm:inter_token_latency_seconds" in missing.note
    # another client's requests shared the window: 45 intervals, not the batch's 30
    foreign = batch_pace(streams, itl_delta(metrics(0.0, 0), metrics(0.2, 45)))
    assert foreign.itl_s is None and "45 inter-token intervals against the batch's 30" in (
        foreign.note
    )
    still = batch_pace(streams, itl_delta(metrics(0.5, 10), metrics(0.5, 40)))
    assert still.itl_s is None and "did not grow" in still.note
    assert missing.stream == (pytest.approx(0.003), pytest.approx(0.003))


def _batch(itl_s: float | None, burst: float = 1.0) -> BatchPace:
    note = (
        "" if itl_s is not None else "the server's /metrics has no vllm:inter_token_latency_seconds"
    )
    return BatchPace((0.003, 0.004), True, itl_s, note, burst)


def test_a_point_uses_the_server_only_when_every_batch_has_it() -> None:
    both = decode_point(2, 300, [_batch(0.0031), _batch(0.0033)])
    assert both.source == FROM_SERVER and both.itl == (0.0031, 0.0033)
    assert both.stream == (0.003, 0.004, 0.003, 0.004) and both.note == ""
    one = decode_point(2, 300, [_batch(0.0031), _batch(None, burst=8.0)])
    assert one.source == STREAM and one.itl == (0.0031,)
    assert "no vllm:inter_token_latency_seconds" in one.note
    assert "1 of 2 batches streamed in bursts" in one.note
    with pytest.warns(RuntimeWarning, match=r"http://h:1: 1 of 2 decode points timed from"):
        warn_streamed("http://h:1", [both, one])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_streamed("http://h:1", [both])  # all from the server: silent


def test_decode_points_round_trip_and_old_documents_still_load() -> None:
    one = samples(1, "2026-12-01T10:00:00+00:00")
    points = tuple(
        DecodePoint(s, k, FROM_SERVER if s > 1 else STREAM, p, p[:1], "" if s > 1 else "why")
        for s, k, p in one.decode
    )
    two = dataclasses.replace(one, decode_points=points)
    data = json.loads(json.dumps(two.to_json()))
    assert samples_from_json(data) == two
    old = {k: v for k, v in one.to_json().items() if k != "decode_points"}
    assert samples_from_json(old) == one and one.decode_from()[SHAPES[0]] == STREAM
    src = fit_samples([two]).source
    assert [row[2] for row in src["decode_from"]] == [
        FROM_SERVER if s > 1 else STREAM for s, _ in SHAPES
    ]
    pooled = fit_samples([two, samples(2, "2026-12-01T11:00:00+00:00")]).source
    assert pooled["decode_from"][-1] == [8, 3616, f"{FROM_SERVER} + {STREAM}"]


def test_a_decode_step_below_the_floor_is_refused() -> None:
    """Paces of ~10 µs (streams read in bursts) against ~12 ms TTFTs: not a profile."""
    good = samples(3, "2026-12-01T10:00:00+00:00", url="http://127.0.0.1:8101")
    free = dataclasses.replace(
        good, decode=tuple((s, k, tuple(1e-5 for _ in p)) for s, k, p in good.decode)
    )
    with pytest.raises(EngineFitError) as info:
        fit_samples([free])
    message = str(info.value)
    assert message.startswith("http://127.0.0.1:8101: the fitted decode step of 1 sequence")
    assert f"under {DECODE_FLOOR:g} × a one-token prefill" in message and "\n" not in message
    # just above the floor passes, just below does not: the rule is the floor itself
    one_token = fit_samples([good]).prefill_s(1)
    for factor, ok in ((1.1, True), (0.9, False)):
        pace = DECODE_FLOOR * one_token * factor
        flat = dataclasses.replace(
            good, decode=tuple((s, k, tuple(pace for _ in p)) for s, k, p in good.decode)
        )
        if ok:
            fit_samples([flat])
        else:
            with pytest.raises(EngineFitError, match="decode was not timed"):
                fit_samples([flat])
    fit_samples([good])  # a real server's figures pass


def test_a_decode_step_at_the_floor_itself_passes() -> None:
    """Refused is a step *under* the floor: one of exactly ``DECODE_FLOOR`` × a one-token
    prefill (1 s here) is a profile."""
    prefill = QuadraticFit(a=0.5, b=0.25, q=0.25, rmse_s=0.0, max_rel_error=0.0)
    at = DecodeFit(step_s=DECODE_FLOOR, per_seq_s=0.0, per_kv_token_s=0.0, max_rel_error=0.0)
    check_decode_floor(prefill, at, [(1, 64, DECODE_FLOOR)], ["http://127.0.0.1:8101"])


def test_the_floor_doubts_streamed_timings_only() -> None:
    """A fast step behind a slow round trip (a small model on a GPU, a remote server) is
    real when the server's own inter-token latency timed it: the floor does not apply."""
    good = samples(3, "2026-12-01T10:00:00+00:00", url="http://127.0.0.1:8101")
    fast = tuple((s, k, tuple(1e-5 for _ in p)) for s, k, p in good.decode)
    timed = tuple(DecodePoint(s, k, FROM_SERVER, p, p, "") for s, k, p in fast)
    fit_samples([dataclasses.replace(good, decode=fast, decode_points=timed)])
    # one point streamed: doubted again
    mixed = (dataclasses.replace(timed[0], source=STREAM, note="bursts"), *timed[1:])
    with pytest.raises(EngineFitError, match="decode was not timed"):
        fit_samples([dataclasses.replace(good, decode=fast, decode_points=mixed)])


def test_a_stream_is_timed_end_to_end_to_its_end_or_its_last_token() -> None:
    """The wake's calls are timed sent to the stream's end ([DONE] read); a stream whose end
    was not recorded (built by hand) ends at its last token."""
    arrivals = ((0.25, 1), (0.5, 2))
    assert Stream(0.125, arrivals, None, 0.75).total_s == 0.625
    assert Stream(0.125, arrivals, None).total_s == 0.375
