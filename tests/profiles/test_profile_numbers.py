"""A profile's numbers are checked where it is read: one rule
(:func:`profiles.profile_read.coefficient_problem`) for every command that loads one."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from profiles.profile_read import ProfileError, from_json, load
from profiles.shipped import DATA


def _doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DATA / "llama-3.1-8b-h100.json").read_text())
    return doc


def _changed(part: str, values: dict[str, Any]) -> dict[str, Any]:
    doc = _doc()
    if part:
        doc[part] |= values
    else:
        doc |= values
    return doc


@pytest.mark.parametrize(
    ("part", "values", "message"),
    [
        ("prefill", {"a": -1.0, "b": -1.0, "q": -1.0}, r"prefill\.a is -1\.0; .*>= 0$"),
        ("prefill", {"b": -1.0}, r"prefill\.b is -1\.0; .*>= 0$"),
        ("prefill", {"q": math.inf}, r"prefill\.q is inf; .*finite"),
        ("prefill", {"rmse_s": -0.5}, r"prefill\.rmse_s is -0\.5; "),
        ("prefill", {"a": 0.0, "b": 0.0, "q": 0.0}, r"no prefill fit \(prefill\.a, prefill\.b"),
        ("decode", {"step_s": -1.0}, r"decode\.step_s is -1\.0; .*>= 0$"),
        ("decode", {"per_seq_s": math.nan}, r"decode\.per_seq_s is nan; "),
        ("decode", {"step_s": 0, "per_seq_s": 0, "per_kv_token_s": 0}, r"no decode fit \("),
        ("reload", {"bandwidth_bytes_per_s": 0.0}, r"reload\.bandwidth_bytes_per_s is 0\.0; "),
        ("reload", {"latency_s": -1e-6}, r"reload\.latency_s is -1e-06; "),
        ("", {"kv_bytes_per_token": 0}, r"kv_bytes_per_token is 0; .*> 0$"),
        ("", {"max_context": -5}, r"max_context is -5; .*> 0$"),
    ],
)
def test_an_impossible_number_is_refused_naming_its_field(
    part: str, values: dict[str, Any], message: str
) -> None:
    """Regression: negative prefill a, b, q (a TTFT of -1379500 s), a negative decode step
    and a profile without a decode fit were accepted (the last two stalled the simulator,
    naming neither file nor field); a NaN was refused as "non-finite coefficient"."""
    with pytest.raises(ProfileError, match=f"^p.json: {message}"):
        from_json(_changed(part, values), "p.json")


@pytest.mark.parametrize(
    ("part", "values", "message"),
    [
        ("prefill", {"b": "x"}, r'prefill\.b is "x", not a number$'),
        ("decode", {"step_s": True}, r"decode\.step_s is true, not a number$"),
        ("reload", {"latency_s": None}, r"reload\.latency_s is missing$"),
        ("", {"max_context": 1.5}, r"max_context is 1\.5, not a whole number$"),
        ("", {"kv_bytes_per_token": "131072"}, r'kv_bytes_per_token is "131072", not a whole'),
    ],
)
def test_a_field_that_is_not_a_number_is_named(
    part: str, values: dict[str, Any], message: str
) -> None:
    """Regression: prefill.b "x" read "missing or invalid field could not convert string to
    float: 'x'", naming no field; true was read as 1.0 and 1.5 tokens as 1."""
    with pytest.raises(ProfileError, match=f"^p.json: {message}"):
        from_json(_changed(part, values), "p.json")


def test_a_prefill_fit_on_top_of_the_decode_step_may_find_nothing_more() -> None:
    """Regression: a vLLM profile fits its prefill steps on top of decode.step_s
    (includes_step false); where no step took longer than that the fit is all zeros, and
    the profile ttlctl profile wrote was refused on reading back ("a prefill would cost
    nothing", where each step costs decode.step_s). Without the step, it is refused."""
    doc = _changed("prefill", {"a": 0.0, "b": 0.0, "q": 0.0, "includes_step": False})
    assert doc["decode"]["step_s"] > 0
    assert from_json(doc, "p.json").prefill_fixed_s == doc["decode"]["step_s"]
    doc["decode"] |= {"step_s": 0.0}
    with pytest.raises(ProfileError, match=r"no prefill fit \(prefill\.a \+ decode\.step_s"):
        from_json(doc, "p.json")


def test_a_step_fits_negative_intercept_prices_no_prefill_below_nothing() -> None:
    """A fit on top of decode.step_s may find ``a`` below 0 (its steps' fixed cost is
    ``a + step_s``, not negative): the quadratic it states, read as seconds, is never under
    0, however short the prompt."""
    doc = _changed("prefill", {"a": -0.002, "b": 1e-6, "q": 0.0, "includes_step": False})
    profile = from_json(doc, "p.json")
    assert profile.prefill_fixed_s >= 0
    assert profile.prefill_s(10) == 0.0 and profile.prefill_s(4000) == pytest.approx(0.002)


def test_a_missing_part_is_named() -> None:
    """Regression: a profile without ``decode`` read "missing or invalid field 'decode'"."""
    doc = _doc()
    del doc["decode"]
    with pytest.raises(ProfileError, match=r"^p.json: decode is missing$"):
        from_json(doc, "p.json")


def test_every_shipped_profile_keeps_the_rule() -> None:
    for path in sorted(DATA.glob("*.json")):
        assert load(path).name == path.stem


def test_the_cached_prefix_terms_are_read_and_held_to_the_rule() -> None:
    """``prefill.per_cached_token_s`` and ``per_context_pair_s`` are read from the file,
    and a negative pair term is refused like every other cost; a whole number written
    as a float (2048.0) is a whole number."""
    profile = from_json(
        _changed("prefill", {"per_cached_token_s": 2e-6, "per_context_pair_s": 3e-11})
    )
    assert profile.prefill.per_cached_token_s == 2e-6
    assert profile.prefill.per_context_pair_s == 3e-11
    with pytest.raises(ProfileError, match=r"^p.json: prefill\.per_context_pair_s is -1e-11; "):
        from_json(_changed("prefill", {"per_context_pair_s": -1e-11}), "p.json")
    assert from_json(_changed("", {"max_context": 2048.0})).max_context == 2048
