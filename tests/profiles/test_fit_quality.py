"""profiles/fit_quality.py: a profile whose models miss their own timings by much is named,
so that ``ttlctl profile`` warns before a replay is priced on noise."""

from __future__ import annotations

import json
from typing import Any

import pytest

from profiles import shipped
from profiles.fit_quality import NOISY, misfits


def test_a_quiet_profile_has_no_misfit() -> None:
    """The shipped profiles were measured on quiet machines: every model within the bound."""
    for path in sorted(shipped.DATA.glob("*.json")):
        doc = json.loads(path.read_text())
        assert misfits(doc.get("source", {})) == [], path.name


@pytest.mark.parametrize(
    ("fit", "cpu", "named"),
    [
        ({"prefill_max_rel_error": 0.98, "decode_max_rel_error": 0.04}, True, [("prefill", 0.98)]),
        ({"decode_max_rel_error": 0.5}, True, [("decode step", 0.5)]),
        ({"prefill_max_rel_error": NOISY}, True, []),  # at the bound: not noisy
        # a CPU has no host tier: its copy's noise prices nothing
        ({"reload_max_rel_error": 0.66}, True, []),
        ({"reload_max_rel_error": 0.66}, False, [("host-to-device copy", 0.66)]),
        # a live server's nested shape
        (
            {
                "prefill": {"rmse_s": 0.1, "max_rel_error": 0.3},
                "cached_prefill": {"points": [], "max_rel_error": None},
                "decode": {"max_rel_error": 0.25, "points": []},
            },
            False,
            [("prefill", 0.3), ("decode step", 0.25)],
        ),
        ({"prefill_max_rel_error": True, "decode_max_rel_error": "big"}, False, []),
    ],
)
def test_a_model_that_misses_its_own_timings_is_named(
    fit: dict[str, Any], cpu: bool, named: list[tuple[str, float]]
) -> None:
    assert misfits({"fit": fit, "cpu_profile": cpu}) == named


def test_a_profile_without_fit_notes_has_nothing_to_say() -> None:
    assert misfits({}) == [] and misfits({"fit": "n/a"}) == []


def test_a_noisy_prefill_on_a_cached_prefix_is_named() -> None:
    """A live server's cached-prefix fit is one of the models checked, in its place."""
    fit = {
        "prefill": {"max_rel_error": 0.01},
        "cached_prefill": {"points": [], "max_rel_error": 0.45},
        "decode": {"max_rel_error": 0.3},
    }
    assert misfits({"fit": fit}) == [("decode step", 0.3), ("prefill on a cached prefix", 0.45)]
