"""η on synthetic programs: fixed length ≈ 1, geometric ≈ 0, heavy-tailed < 0."""

from __future__ import annotations

import numpy as np
import pytest

from fitting import eta_bootstrap
from fitting.eta import DEFAULT_ETA, EtaSums, clamp, from_fit
from fitting.eta_bootstrap import estimate


def _pairs_eta(lengths: np.ndarray) -> float:
    """Reference: build every (k, N−k) pair explicitly and correlate them."""
    ks, rest = [], []
    for n in lengths:
        for k in range(1, int(n)):
            ks.append(k)
            rest.append(int(n) - k)
    return -float(np.corrcoef(ks, rest)[0, 1])


def test_fixed_length_gives_one() -> None:
    est = estimate(np.full(500, 11))
    assert est.value == pytest.approx(1.0)
    assert est.ci_low == pytest.approx(1.0) and est.ci_high == pytest.approx(1.0)


def test_geometric_gives_about_zero() -> None:
    rng = np.random.default_rng(1)
    est = estimate(rng.geometric(0.1, 20_000))
    assert abs(est.value or 9) < 0.05
    assert est.ci_low is not None and est.ci_high is not None
    assert est.ci_low < 0.0 < est.ci_high or abs(est.value or 9) < 0.02


def test_heavy_tail_gives_negative() -> None:
    rng = np.random.default_rng(2)
    lengths = np.ceil(rng.pareto(1.2, 5_000) * 3 + 1).astype(int)
    est = estimate(lengths)
    assert est.value is not None and est.value < -0.2
    assert est.ci_high is not None and est.ci_high < 0


def test_closed_form_matches_explicit_pairs_and_online_sums() -> None:
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 40, 300)
    reference = _pairs_eta(lengths)
    assert estimate(lengths, bootstrap=0).value == pytest.approx(reference, abs=1e-12)
    online = EtaSums()
    for n in lengths:
        online.add(int(n))
    assert online.eta() == pytest.approx(reference, abs=1e-12)


def test_undefined_cases() -> None:
    assert estimate([]).value is None
    assert estimate([1, 1, 1]).value is None  # no decision points
    assert estimate([2, 2, 2]).value is None  # every pair is (1, 1)


def test_one_program_has_an_eta_but_no_interval() -> None:
    """One program of five calls: its pairs give η, but resampling one program gives the
    same sums every time, so no interval is claimed and no resample is drawn."""
    est = estimate([5])
    assert est.value is not None and est.value == estimate([5, 5], bootstrap=0).value
    assert (est.ci_low, est.ci_high, est.programs, est.pairs, est.bootstrap) == (
        None,
        None,
        1,
        4,
        0,
    )


def test_bootstrap_is_seeded() -> None:
    lengths = np.random.default_rng(4).integers(2, 30, 200)
    a, b = estimate(lengths, seed=7), estimate(lengths, seed=7)
    assert (a.ci_low, a.ci_high) == (b.ci_low, b.ci_high)
    assert a.ci_low is not None and a.ci_low <= (a.value or 0) <= (a.ci_high or 0)


def test_clamp_and_the_eta_of_a_fit() -> None:
    assert [clamp(v) for v in (-3.0, -0.5, 0.25, 1.5)] == [-1.0, -0.5, 0.25, 1.0]
    assert clamp(float("nan")) == DEFAULT_ETA
    assert from_fit({"eta": {"value": 1.2}}) == 1.0
    assert from_fit({"eta": {"value": -0.3}}) == -0.3
    assert from_fit({"eta": {"value": None}}) == from_fit({}) == DEFAULT_ETA


def test_the_bootstrap_bounds_its_draws_but_keeps_a_floor_of_resamples(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lengths = [2, 3, 5, 8, 13] * 20  # 100 programs
    monkeypatch.setattr(eta_bootstrap, "MAX_DRAWS", 30_000)  # 300 resamples of 100
    assert eta_bootstrap.estimate(lengths, bootstrap=1_000).bootstrap == 300
    assert eta_bootstrap.estimate(lengths, bootstrap=250).bootstrap == 250  # as asked
    monkeypatch.setattr(eta_bootstrap, "MAX_DRAWS", 1_000)  # 10 resamples: the floor
    assert eta_bootstrap.estimate(lengths, bootstrap=1_000).bootstrap == eta_bootstrap.MIN_RESAMPLES


def test_the_interval_is_the_95_percent_percentile_bootstrap_over_every_program() -> None:
    """The interval is the 2.5th and 97.5th percentiles of η over resamples of the programs
    drawn with replacement (any program, the last included), the count of resamples kept in
    ``bootstrap``. Two programs of 3 and 10 calls: a resample is {3, 3} or {10, 10} (η = 1,
    fixed length) or one of each (η of the pair, half the draws), so the interval is exactly
    [η, 1]; a bootstrap that never drew the last program would say [1, 1]."""
    est = estimate([3, 10], bootstrap=1000, seed=5)
    assert est.value is not None and est.value < 0.9
    assert est.ci_low == pytest.approx(est.value) and est.ci_high == pytest.approx(1.0)
    assert est.bootstrap == 1000

    lengths = np.random.default_rng(6).integers(1, 30, 40)
    est = estimate(lengths, bootstrap=300, seed=11)
    idx = np.random.default_rng(11).integers(0, lengths.size, size=(300, lengths.size))
    draws = [_pairs_eta(lengths[row]) for row in idx]
    low, high = np.quantile(draws, [0.025, 0.975])
    assert (est.ci_low, est.ci_high) == (pytest.approx(low), pytest.approx(high))


def test_no_estimate_draws_no_resample() -> None:
    """Where η is undefined, or the bootstrap is off, there is no interval and the fit
    records no resample drawn (``eta.bootstrap`` 0: what the CLI's line compares)."""
    for lengths, asked in (([2, 2, 2], 100), ([1, 1], 100), ([3, 5, 8], 0)):
        est = estimate(lengths, bootstrap=asked)
        assert (est.ci_low, est.ci_high, est.bootstrap) == (None, None, 0), lengths
