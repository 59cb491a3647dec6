"""Why a follow-up call missed its program's cache (replay/fleet/metrics.py
``miss_reasons``), each reason from a hand-made route: the previous call's replica, its
pin's expiry (τ), whether the pin was still held when the call came, and when it came."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from replay.fleet.books import CallRoute
from replay.fleet.metrics import miss_reasons
from replay.scheduler import SimSchedulerConfig
from replay.sim_outcome import SimCallRecord
from replay.workload import AgentProgram, Call, Workload

BS = 16
#: one program: a first call of 640 + 64 tokens, then one that repeats all of it
WORK = Workload(
    (
        AgentProgram(
            "p",
            0.0,
            (Call(640, 64, 0, "bash", 2.0), Call(800, 32, 704, None, 0.0)),
        ),
    )
)


def _reasons(route: CallRoute, hit_tokens: int = 0) -> dict[str, int]:
    follow_up = SimCallRecord("p", 1, 12.0, 12.0, 12.5, 13.0, 800, 32, hit_tokens, 0)
    outcome: Any = SimpleNamespace(
        calls=[follow_up],
        routes={("p", 1): route},
        engines=[SimpleNamespace(config=SimSchedulerConfig(block_size=BS))],
    )
    return {k: v for k, v in miss_reasons(outcome, WORK).items() if v}


@pytest.mark.parametrize(
    ("route", "reason"),
    [
        (CallRoute(1, 0, 15.0, False, 12.0), "routed_elsewhere"),
        (CallRoute(0, 0, None, False, 12.0), "never_pinned"),
        (CallRoute(0, 0, 15.0, True, 12.0), "evicted"),  # held, gone by admission
        # not held when the call came, within τ: the valve released it
        (CallRoute(0, 0, 15.0, False, 12.0), "released_by_valve"),
        # not held, after τ: it ran out, whether or not the valve had released it sooner
        (CallRoute(0, 0, 11.5, False, 12.0), "expired"),
        (CallRoute(0, 0, 12.0, False, 12.0), "expired"),
    ],
)
def test_each_miss_has_its_reason(route: CallRoute, reason: str) -> None:
    assert _reasons(route) == {reason: 1}


def test_a_full_hit_is_no_miss() -> None:
    # the most it can hit: the previous call's computed full blocks (704 - 1 tokens)
    assert _reasons(CallRoute(1, 0, 15.0, False, 12.0), hit_tokens=688) == {}
    assert _reasons(CallRoute(1, 0, 15.0, False, 12.0), hit_tokens=672) == {"routed_elsewhere": 1}
