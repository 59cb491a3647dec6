"""A profile's measured wake (``Profile.wake``, ``wake_s``): what a call after an idle spell
costs beyond the same call on a busy engine, as (idle seconds, extra seconds) points.
Interpolated from (0, 0), flat past the last point, written only when measured, and refused
with one line when its points are not (idle ascending, neither negative, finite)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from profiles import shipped
from profiles.profile_read import ProfileError, from_json

POINTS = [[0.1, 0.01], [1.0, 0.016]]


def _doc(wake: Any = None) -> Any:
    doc: Any = json.loads((shipped.DATA / "tiny-cpu.json").read_text())
    doc.pop("wake", None)
    if wake is not None:
        doc["wake"] = wake
    return doc


def test_the_wake_reads_back_and_is_written_only_when_measured() -> None:
    profile = from_json(_doc(POINTS))
    assert profile.wake == ((0.1, 0.01), (1.0, 0.016))
    again = from_json(json.loads(json.dumps(profile.to_json())))
    assert again == profile
    assert again.to_json()["wake"] == POINTS
    plain = from_json(_doc())
    assert plain.wake == () and "wake" not in plain.to_json()
    assert from_json(_doc([])).wake == ()


def test_the_wake_is_linear_from_nothing_and_flat_past_the_last_point() -> None:
    profile = from_json(_doc(POINTS))
    assert profile.wake_s(0.0) == 0.0
    assert profile.wake_s(-1.0) == 0.0
    assert profile.wake_s(0.05) == pytest.approx(0.005)  # half way from (0, 0)
    assert profile.wake_s(0.1) == pytest.approx(0.01)
    assert profile.wake_s(0.55) == pytest.approx(0.013)  # half way between the points
    assert profile.wake_s(1.0) == pytest.approx(0.016)
    assert profile.wake_s(600.0) == pytest.approx(0.016)
    assert from_json(_doc()).wake_s(5.0) == 0.0
    # a point at idle 0 is its own value from the start
    assert from_json(_doc([[0.0, 0.002], [1.0, 0.004]])).wake_s(0.5) == pytest.approx(0.003)


@pytest.mark.parametrize(
    "wake",
    [
        [[1.0, 0.01], [0.1, 0.02]],  # idle not ascending
        [[0.1, 0.01], [0.1, 0.02]],  # the same idle twice
        [[-0.1, 0.01]],
        [[0.1, -0.01]],
        [[0.1, float("inf")]],
    ],
)
def test_bad_points_are_refused_in_one_line(wake: Any) -> None:
    with pytest.raises(ProfileError, match="wake must be") as err:
        from_json(_doc(wake), where="p.json")
    assert str(err.value).startswith("p.json: ") and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "wake",
    [
        [[0.1]],
        [[0.1, 0.01, 0.02]],
        [["x", 0.01]],
        [["0.1", 0.01]],
        [[0.1, None]],
        [[True, 0.01]],
        [0.1, 0.01],  # a point, not a list of them
        3,
        "x",
        {"0.1": 0.01},
    ],
)
def test_malformed_points_name_the_field(wake: Any) -> None:
    with pytest.raises(ProfileError, match="wake must be a list of") as err:
        from_json(_doc(wake), where="p.json")
    assert str(err.value).startswith("p.json: ") and "\n" not in str(err.value)


def test_a_refusal_inside_the_fields_is_not_wrapped_again() -> None:
    doc = _doc()
    doc["prefill"]["includes_step"] = 3
    with pytest.raises(ProfileError) as err:
        from_json(doc, where="p.json")
    assert str(err.value) == "p.json: prefill.includes_step must be true or false"


def test_no_idle_spell_and_no_step_cost_nothing_extra() -> None:
    """``wake_s``: 0 without an idle spell, even where a point is measured at 0 s idle;
    ``new_shape_s``: a step of no tokens is no new size."""
    from profiles.new_shape import new_shape_s
    from profiles.wake import wake_s

    assert wake_s(((0.0, 0.5), (10.0, 1.0)), 0.0) == 0.0
    assert wake_s(((0.0, 0.5), (10.0, 1.0)), 5.0) == pytest.approx(0.75)
    assert new_shape_s(((300.0, 0.02), (1500.0, 0.04)), 0) == 0.0
    assert new_shape_s(((300.0, 0.02), (1500.0, 0.04)), 100) == 0.02
