"""The wake fitted from a server's timings (:func:`profiles.engine_fit.fit_samples`): each idle
gap's extras (a call after the idle spell less the same call on a busy engine) pooled over
every measurement, their median, never below 0, as ``Profile.wake``; said in ``source``, and
nothing where nothing was timed. Checked on hand-made timings (tests/profiles/engine_samples.py)."""

from __future__ import annotations

import dataclasses
import json
import statistics

import pytest

from profiles.engine_fit import NOT_TIMED, WAKE_TIMING, fit_samples
from profiles.engine_timings import EngineSamples, samples_from_json
from profiles.profile_read import from_json
from profiles.server_wake import NO_ROOM, wake_prefix
from tests.profiles.engine_samples import samples

WHEN = "2026-12-04T00:00:00+00:00"
LATER = "2026-12-04T01:00:00+00:00"
#: each pair's extra seconds at each idle gap, as profiles.server_wake times them
WAKE = (
    (0.1, (0.0091, 0.0112, 0.0104, 0.0099, 0.0120)),
    (1.0, (0.0163, 0.0149, 0.0171, 0.0158, 0.0166)),
)


def _with(
    s: EngineSamples, wake: tuple[tuple[float, tuple[float, ...]], ...], note: str = ""
) -> EngineSamples:
    return dataclasses.replace(s, wake=wake, wake_note=note)


def test_each_gap_is_the_median_of_its_extras() -> None:
    profile = fit_samples([_with(samples(1, WHEN), WAKE)])
    want = tuple((idle, statistics.median(extras)) for idle, extras in WAKE)
    assert profile.wake == want
    assert profile.wake_s(1.0) == pytest.approx(statistics.median(WAKE[1][1]))
    assert profile.source["wake_timing"] == WAKE_TIMING
    assert profile.source["fit"]["wake"]["points"] == [list(p) for p in profile.wake]
    # written with the profile, and read back the same
    assert from_json(json.loads(json.dumps(profile.to_json()))) == profile


def test_measurements_pool_their_extras_gap_by_gap() -> None:
    one = _with(samples(2, WHEN), WAKE)
    other = ((0.1, (0.030, 0.031)), (1.0, (0.002,)), (3.0, (0.020, 0.024)))
    two = _with(samples(3, LATER), other)
    pooled = fit_samples([two, one])  # order given does not matter
    assert pooled == fit_samples([one, two])
    by_gap: dict[float, list[float]] = {}
    for idle, extras in (*WAKE, *other):
        by_gap.setdefault(idle, []).extend(extras)
    assert pooled.wake == tuple((idle, statistics.median(by_gap[idle])) for idle in sorted(by_gap))


def test_an_idle_call_faster_than_a_busy_one_costs_nothing() -> None:
    faster = ((0.1, (-0.004, -0.002, 0.001)), (1.0, (0.003, -0.001, 0.005)))
    profile = fit_samples([_with(samples(4, WHEN), faster)])
    assert profile.wake == ((0.1, 0.0), (1.0, 0.003))
    assert all(extra >= 0 for _, extra in profile.wake)


def test_nothing_timed_is_no_wake_and_says_why() -> None:
    old = samples(5, WHEN).to_json()
    del old["wake"], old["wake_note"]  # written before the wake was timed
    plain = fit_samples([samples_from_json(old)])
    assert plain.wake == () and "wake" not in plain.to_json()
    assert plain.source["wake_timing"] == NOT_TIMED
    assert plain.source["fit"]["wake"]["points"] == []
    told = fit_samples([_with(samples(6, WHEN), (), NO_ROOM)])
    assert told.wake == () and told.source["wake_timing"] == NO_ROOM


def test_a_measurement_with_its_wake_reads_back() -> None:
    s = _with(samples(7, WHEN), WAKE)
    assert samples_from_json(json.loads(json.dumps(s.to_json()))) == s
    noted = _with(samples(8, WHEN), (), NO_ROOM)
    assert samples_from_json(json.loads(json.dumps(noted.to_json()))) == noted
    old = s.to_json()
    del old["wake"], old["wake_note"]
    assert samples_from_json(old).wake == () and samples_from_json(old).wake_note == ""


def test_the_prefix_is_half_the_longest_prompt_with_room_for_the_new_tokens() -> None:
    assert wake_prefix([64, 256, 1024]) == 512
    assert wake_prefix([64, 128]) == 64
    assert wake_prefix([64, 127]) == 0  # a prefix under 64 tokens
    assert NO_ROOM.startswith("not measured")
