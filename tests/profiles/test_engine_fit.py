"""The engine profile's fit, on one measurement or several pooled (profiles/engine_fit.py).

Hand-made measurements of one server: TTFTs and decode paces drawn around a known cost
model. Checked: one measurement fits its own medians (what ``measure_engine`` wrote
before pooling existed); several pool their timings point by point before the one fit
(not a median of medians, not a mean of coefficients); the pooled profile is the same
whatever the order the measurements come in, and the same each time; measurements of
different servers are refused in one line; a measurement reads back from its JSON.
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import replace

import pytest

from profiles.engine_fit import (
    DECODE_FLOOR,
    check_decode_floor,
    fit_samples,
    pooled_points,
    profile_name,
)
from profiles.engine_timings import EngineFitError, samples_from_json
from profiles.fitmath import DecodeFit, QuadraticFit, fit_decode, fit_quadratic
from profiles.profile_read import from_json
from profiles.schema import Decode
from tests.profiles.engine_samples import CONTEXTS, SHAPES, samples, ttft


def test_one_measurement_is_the_fit_of_its_own_medians() -> None:
    one = samples(1, "2026-12-02T03:30:00+00:00")
    profile = fit_samples([one])
    medians = [statistics.median(t) for _, t in one.prefill]
    want = fit_quadratic(list(CONTEXTS), medians)
    assert profile.prefill.points == tuple(zip(CONTEXTS, medians, strict=True))
    assert (profile.prefill.a, profile.prefill.b, profile.prefill.q) == (want.a, want.b, want.q)
    paces = [statistics.median(p) for _, _, p in one.decode]
    dec = fit_decode([s for s, _ in SHAPES], [k for _, k in SHAPES], paces)
    assert profile.decode == Decode(dec.step_s, dec.per_seq_s, dec.per_kv_token_s)
    src = profile.source
    assert "pooled" not in src and src["repeats"] == 2 and src["url"] == one.url
    assert src["created"] == one.created and profile.device == f"vllm server at {one.url}"
    assert profile.name == "engine-tiny55m" and profile.max_context == 2048
    # the fit recovers the model the timings were drawn around (±5% noise)
    assert profile.prefill_s(1024) == pytest.approx(ttft(1024), rel=0.05)
    assert from_json(profile.to_json()) == profile


def test_measurements_pool_their_timings_before_the_median_and_the_fit() -> None:
    runs = [samples(k, f"2026-12-02T03:3{k}:00+00:00", url=f"http://127.0.0.1:81{k}0",
                     scale=1 + 0.2 * k) for k in range(3)]  # fmt: skip
    profile = fit_samples(runs)
    every = {c: [t for r in runs for cc, ts in r.prefill if cc == c for t in ts] for c in CONTEXTS}
    assert profile.prefill.points == tuple((c, statistics.median(every[c])) for c in CONTEXTS)
    want = fit_quadratic(list(CONTEXTS), [statistics.median(every[c]) for c in CONTEXTS])
    assert profile.prefill.b == want.b
    _, decode = pooled_points(runs)
    assert decode[0] == (1, 136, statistics.median([p for r in runs for p in r.decode[0][2]]))
    assert profile.source["fit"]["decode"]["points"] == [list(p) for p in decode]
    pooled = profile.source["pooled"]
    assert pooled["measurements"] == 3 and profile.source["repeats"] == 6
    assert [t["created"] for t in pooled["taken"]] == [r.created for r in runs]
    assert profile.source["created"] == runs[-1].created
    assert profile.source["url"] == [r.url for r in runs]
    assert profile.source["max_cached_tokens_seen"] == 2
    # between the slowest and the fastest measurement's own fits
    alone = [fit_samples([r]).prefill_s(1024) for r in runs]
    assert min(alone) < profile.prefill_s(1024) < max(alone)


def test_a_point_pools_every_timing_not_the_measurements_medians() -> None:
    base = samples(5, "2026-12-02T03:30:00+00:00")
    a = replace(base, prefill=((128, (0.1, 0.2)), *base.prefill[1:]))
    b = replace(base, created="2026-12-02T03:35:00+00:00",
                prefill=((128, (0.3, 1.0, 1.1)), *base.prefill[1:]))  # fmt: skip
    prefill, _ = pooled_points([a, b])
    # the median of 0.1, 0.2, 0.3, 1.0, 1.1; the medians' median would be 0.625
    assert prefill[0] == (128, 0.3)


def test_pooling_is_deterministic_and_order_free() -> None:
    runs = [samples(k, f"2026-12-02T03:{30 + k}:00+00:00", scale=1 + 0.1 * k) for k in range(3)]
    first = fit_samples(runs).to_json()
    assert fit_samples(runs).to_json() == first
    for order in itertools.permutations(runs):
        assert fit_samples(list(order)).to_json() == first


def test_a_measurement_pooled_with_its_copy_fits_as_itself() -> None:
    one = samples(4, "2026-12-02T03:30:00+00:00")
    alone, twice = fit_samples([one]), fit_samples([one, one])
    assert twice.prefill == alone.prefill and twice.decode == alone.decode
    assert twice.source["pooled"]["measurements"] == 2 and twice.source["repeats"] == 4


def test_measurements_of_different_servers_are_refused() -> None:
    a = samples(1, "2026-12-02T03:30:00+00:00")
    b = samples(2, "2026-12-02T03:31:00+00:00", kv_bytes=8192)
    with pytest.raises(EngineFitError, match=r"kv_bytes_per_token 12288 at \S+ against 8192"):
        fit_samples([a, b])
    with pytest.raises(EngineFitError, match="no measurement"):
        fit_samples([])


def test_a_measurement_reads_back_from_its_json() -> None:
    one = samples(3, "2026-12-02T03:30:00+00:00")
    assert samples_from_json(one.to_json()) == one
    broken = one.to_json()
    del broken["prefill"]
    with pytest.raises(
        EngineFitError, match=r"m\.json: missing or invalid field 'prefill' \(absent\)"
    ):
        samples_from_json(broken, "m.json")
    # a field that does not parse is named, and why (the wake's points are pairs)
    for bad in ([[0.1]], [[0.1, 0.02]], [["x", [0.01]]]):
        broken = {**one.to_json(), "wake": bad}
        with pytest.raises(
            EngineFitError, match=r"m\.json: missing or invalid field 'wake' \(.+\)$"
        ):
            samples_from_json(broken, "m.json")


def test_a_new_size_line_keeps_its_course_past_one_slowed_call() -> None:
    """``Profile.new_shape`` is a Theil–Sen line through the (length, extra) timings of
    every measurement: one call a neighbour slowed by 170 ms leaves it within a few ms of
    the others' line (least squares put 106 ms at the longest length); pooled measurements
    fit as one; without timings, no points."""
    base = samples(1, "2026-12-04T13:00:00+00:00")
    clean = ((300, 0.020), (600, 0.025), (900, 0.030), (1500, 0.040))
    one = replace(base, new_shape=(*clean[:3], (1200, 0.200), clean[3]))
    (lo, at_lo), (hi, at_hi) = fit_samples([one]).new_shape
    assert (lo, hi) == (300, 1500)
    assert at_lo == pytest.approx(0.020, abs=0.003) and at_hi == pytest.approx(0.040, abs=0.003)
    halves = [replace(base, new_shape=clean[:2]), replace(base, new_shape=clean[2:])]
    (x0, y0), (x1, y1) = fit_samples(halves).new_shape
    assert (x0, x1) == (300, 1500) and (y0, y1) == pytest.approx((0.020, 0.040), abs=1e-9)
    assert fit_samples([base]).new_shape == ()


def test_a_new_size_timed_at_one_length_is_its_median_extra_never_below_0() -> None:
    """Every new-size call of one length: one point, the median extra; calls that ran
    faster than the length's repeats (a busy neighbour slowed the repeats) cost nothing."""
    base = samples(1, "2026-12-04T13:00:00+00:00")
    one = replace(base, new_shape=((600, 0.03), (600, 0.01), (600, 0.02)))
    assert fit_samples([one]).new_shape == ((600.0, 0.02),)
    faster = replace(base, new_shape=((600, -0.01), (600, -0.02), (600, 0.005)))
    assert fit_samples([faster]).new_shape == ((600.0, 0.0),)


def test_pooled_measurements_keep_a_step_budget_only_when_all_told_the_same() -> None:
    """``source.flags`` (the profile's ``chunk_tokens``) is the step budget the servers
    told, one for all; measurements that told different ones, or some none, record none."""
    a = replace(samples(1, "2026-12-01T10:00:00+00:00"), step_budget=2048)
    b = replace(samples(2, "2026-12-01T11:00:00+00:00"), step_budget=2048)
    assert fit_samples([a, b]).chunk_tokens == 2048
    for other in (4096, None):
        assert "flags" not in fit_samples([a, replace(b, step_budget=other)]).source


def test_pooled_measurements_are_in_the_order_they_were_taken() -> None:
    """By when they were taken, not by URL: the profile's time is the last one's, and its
    URLs and the measurements listed go in that order."""
    early = samples(1, "2026-12-01T10:00:00+00:00", url="http://b:8000")
    late = samples(2, "2026-12-01T11:00:00+00:00", url="http://a:8000")
    source = fit_samples([late, early]).source
    assert source["created"] == "2026-12-01T11:00:00+00:00"
    assert source["url"] == ["http://b:8000", "http://a:8000"]
    assert [m["url"] for m in source["pooled"]["taken"]] == ["http://b:8000", "http://a:8000"]


def test_the_profiles_name_is_the_model_id_or_a_paths_last_component_made_safe() -> None:
    assert profile_name("Org/Model-7B") == "engine-org-model-7b"
    assert profile_name("Org/Model!") == "engine-org-model"
    assert profile_name("/models/Tiny55M/") == "engine-tiny55m"
    assert profile_name("~/models/Tiny55M") == "engine-tiny55m"
    assert profile_name("./Tiny 55M") == "engine-tiny-55m"
    assert profile_name("!!!") == "engine-model"


def test_measurements_that_generated_different_decode_tokens_are_refused() -> None:
    a = samples(1, "2026-12-02T03:30:00+00:00")
    b = replace(samples(2, "2026-12-02T03:31:00+00:00"), decode_output_tokens=32)
    with pytest.raises(EngineFitError, match=r"decode_output_tokens 16 at .* against 32"):
        fit_samples([a, b])


def test_a_point_with_no_timing_is_left_out() -> None:
    one = samples(1, "2026-12-02T03:30:00+00:00")
    untimed = replace(one, prefill=(*one.prefill, (1536, ())))
    prefill, _decode = pooled_points([untimed])
    assert [c for c, _ in prefill] == list(CONTEXTS)
    assert fit_samples([untimed]).prefill == fit_samples([one]).prefill


def test_a_new_size_line_is_never_below_0_at_either_end() -> None:
    """A line that falls below 0 by the longest length is written as 0 there."""
    base = samples(1, "2026-12-04T13:00:00+00:00")
    falling = replace(base, new_shape=((300, 0.03), (600, 0.02), (900, 0.01), (1500, -0.01)))
    (lo, at_lo), (hi, at_hi) = fit_samples([falling]).new_shape
    assert (lo, hi) == (300, 1500)
    assert at_lo == pytest.approx(0.03) and at_hi == 0.0


def test_a_new_size_length_timed_twice_is_no_slope() -> None:
    """Two measurements timing one length: the slopes are those between different
    lengths only."""
    base = samples(1, "2026-12-04T13:00:00+00:00")
    a = replace(base, new_shape=((300, 0.020), (900, 0.030)))
    b = replace(base, new_shape=((300, 0.022), (1500, 0.040)))
    (lo, _), (hi, at_hi) = fit_samples([a, b]).new_shape
    assert (lo, hi) == (300, 1500) and at_hi > 0.03


def test_pooled_measurements_sum_their_counts_and_keep_a_reset_only_if_all_did() -> None:
    a = replace(samples(1, "2026-12-01T10:00:00+00:00"), decode_batches_without_common_window=2)
    b = replace(samples(2, "2026-12-01T11:00:00+00:00"), decode_batches_without_common_window=3)
    source = fit_samples([a, b]).source
    assert source["decode_batches_without_common_window"] == 5
    assert source["prefix_cache_reset"] is True
    source = fit_samples([a, replace(b, prefix_cache_reset=False)]).source
    assert source["prefix_cache_reset"] is False


def test_an_unknown_model_length_is_the_longest_context_timed() -> None:
    one = replace(samples(1, "2026-12-02T03:30:00+00:00"), max_model_len=0)
    assert fit_samples([one]).max_context == max(CONTEXTS)
    assert fit_samples([samples(1, "2026-12-02T03:30:00+00:00")]).max_context == 2048


def test_the_decode_floor_is_checked_at_one_sequence_at_its_shortest_kv() -> None:
    """The cheapest measured point is one sequence (then its shortest KV), not the
    shortest KV of any batch."""
    prefill = QuadraticFit(0.010, 0.0, 0.0, 0.0, 0.0)  # a one-token prefill of 10 ms
    per_seq = 0.6 * DECODE_FLOOR * 0.010  # one sequence under the floor, four above
    decode = DecodeFit(0.0, per_seq, 0.0, 0.0)
    points = [(1, 5000, 0.0), (4, 100, 0.0)]
    with pytest.raises(EngineFitError, match=r"1 sequence\(s\) at 5000 KV tokens"):
        check_decode_floor(prefill, decode, points, ["http://x"])
    check_decode_floor(prefill, DecodeFit(0.0, 2 * per_seq, 0.0, 0.0), points, ["http://x"])


def test_every_field_reads_back_and_an_older_document_reads_with_the_defaults() -> None:
    """Every field set away from its default survives the JSON; a document written before
    the later fields (only the required ones) reads back with the dataclass's defaults."""
    base = samples(3, "2026-12-02T03:30:00+00:00")
    full = replace(
        base,
        kv_capacity=None,
        version=None,
        decode_batches_without_common_window=2,
        prefix_cache_reset=False,
        max_cached_tokens_seen=64,
        cached_prefill_note="no prefix cache",
        wake=((1.0, (0.01, 0.02)),),
        wake_note="w",
        new_shape=((300, 0.02),),
        new_shape_note="n",
        step_budget=2048,
    )
    assert samples_from_json(full.to_json()) == full
    required = [
        "url",
        "model",
        "max_model_len",
        "kv_bytes_per_token",
        "kv_bytes_from",
        "created",
        "repeats",
        "output_tokens",
        "decode_output_tokens",
        "prefill",
        "decode",
    ]
    old = {k: v for k, v in base.to_json().items() if k in required}
    defaults = replace(base, kv_capacity=None, version=None, max_cached_tokens_seen=0)
    assert samples_from_json(old) == defaults
