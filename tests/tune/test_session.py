"""replay/tune/session.py: the default loads, the live options' rules, the shipped bundle."""

from __future__ import annotations

from pathlib import Path

import pytest

from replay.policy_runs import Load
from replay.tune import TuneError
from replay.tune.session import TuneRequest, check, default_loads


def test_default_loads_are_a_quarter_and_a_half_capped() -> None:
    assert default_loads(20) == (Load(concurrency=5), Load(concurrency=10))
    assert default_loads(1000) == (Load(concurrency=64),)
    assert default_loads(2) == (Load(concurrency=1),)
    assert default_loads(20, live_programs=8) == (Load(concurrency=4),)
    assert default_loads(3, live_programs=8) == (Load(concurrency=1),)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"trials": 0}, "--trials"),
        ({"heartbeat_s": 0}, "--heartbeat-seconds"),
        ({"live_bundle": Path("b.json")}, "goes with --live"),
        ({"live": "http://x"}, "needs --live-bundle"),
        ({"idle_gap_cap_s": -1.0}, "--trace-idle-gap-cap-seconds"),
    ],
)
def test_each_refusal_is_one_tune_error(change: dict[str, object], message: str) -> None:
    base = {"trace": Path("t"), "fit": Path("f"), "profile": "p", "output": Path("o")}
    with pytest.raises(TuneError, match=message):
        check(TuneRequest(**base, **change))  # type: ignore[arg-type]
