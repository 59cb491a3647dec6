"""The simulator applies the plugin's pin rules (``ttlctl.engine.retention``) at vLLM's
moments: expiry at step starts and arrivals only, a pin parked while its program's call
waits, and ``--check`` catching a broken invariant. (``tests/vllmsim/test_pin_parity.py``
checks the same streams against the plugin on vLLM's own scheduler.)"""

from __future__ import annotations

from typing import Any

import pytest

from fitting.policy import TTLPolicy
from fitting.policy_params import PolicyParams
from profiles.cost import ConstantCostModel
from replay.policies import PolicySpec, make
from replay.scheduler import SimScheduler, SimSchedulerConfig
from replay.sim import ReplayConfig, simulate
from replay.sim_error import SimulationError
from replay.workload import AgentProgram, Call, Workload
from ttlctl.engine.retention import OK, Retention
from ttlctl.engine.source import PolicySource
from ttlctl.engine.tags import Tags

COST = ConstantCostModel()


def _static(ttl_s: float, valve: str = "head") -> Any:
    return make(PolicySpec("static-ttl", ttl_s=ttl_s, valve=valve), {}, lambda t, o: 0.0)


def test_an_idle_engine_keeps_its_pins_until_the_next_arrival() -> None:
    """A's call (5 blocks) is pinned for 1 s; A comes back 10 s later and nothing else
    happens meanwhile. The engine does not step while idle, so the pin expires at A's
    arrival: it holds its 5 blocks for the whole pause (not 1 s), then goes as expired
    (not handed over); A's blocks are still cached, so the call hits them anyway."""
    work = Workload(
        (AgentProgram("A", 0.0, (Call(80, 1, 0, "t", 10.0), Call(100, 1, 81, None, 0.0))),)
    )
    cfg = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=16 * 20, block_size=16), check=True)
    out = simulate(work, _static(1.0), COST, cfg)
    first, second = out.calls
    stats = out.engine.stats
    assert (stats.pins_made, stats.pins_expired, stats.pins_hit) == (1, 1, 0)
    pause = second.arrival - first.finish
    assert pause == pytest.approx(10.0)
    assert stats.pinned_block_seconds == pytest.approx(5 * pause)
    assert second.hit_tokens == 80


def test_a_pin_past_its_expiry_is_kept_while_its_programs_call_waits() -> None:
    """A pins 3 blocks for 0.05 s and comes back at once, but its call needs 2 blocks more
    than B (decoding, 7 blocks at its end) leaves free in a 10-block cache; B runs, so the
    head valve has nothing to release but A's own pin, which it spares. A's call waits
    until B finishes, long past τ: the pin is parked, not expired, and handed over."""
    work = Workload(
        (
            AgentProgram("A", 0.0, (Call(40, 1, 0, "t", 0.0), Call(60, 1, 41, None, 0.0))),
            AgentProgram("B", 0.0, (Call(90, 20, 0, None, 0.0),)),
        )
    )
    cfg = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=16 * 10, block_size=16), check=True)
    out = simulate(work, _static(0.05), COST, cfg)
    calls = {(c.program, c.turn): c for c in out.calls}
    stats = out.engine.stats
    assert calls[("A", 1)].admitted >= calls[("B", 0)].finish > calls[("A", 0)].finish + 0.05
    assert (stats.pins_made, stats.pins_hit, stats.pins_expired) == (1, 1, 0)
    assert calls[("A", 1)].hit_tokens == 32


def test_check_mode_catches_a_lost_block(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--check`` (``ReplayConfig.check``) verifies the invariants after every step: a
    pool that loses a block on release is caught at the step that did it."""
    original = SimScheduler._finish

    def leaky(self: SimScheduler, req: Any, now: float) -> None:
        original(self, req, now)
        self.pool.grow("leak", 1)  # a block nobody holds

    monkeypatch.setattr(SimScheduler, "_finish", leaky)
    work = Workload((AgentProgram("A", 0.0, (Call(40, 2, 0, None, 0.0),)),))
    cfg = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=16 * 8, block_size=16), check=True)
    with pytest.raises(SimulationError, match="blocks not conserved"):
        simulate(work, make(PolicySpec("vllm"), {}, lambda t, o: 0.0), COST, cfg)


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_a_step_that_only_preempts_is_followed_by_another_at_once(async_scheduling: bool) -> None:
    """A's pin (τ 100 s, stall-only) holds 6 of 10 blocks; B, alone, grows until it needs
    a block that is not free and preempts itself: that step schedules nothing. The next
    step follows at once (vLLM's engine core loops while it has requests): B is the head
    with nothing running, so the valve releases A's pin and B resumes. Regression: the
    replay took that empty step for a stall and stopped (or, with events left, waited
    for the next one). The same under async scheduling, whose empty step that preempted
    is followed by another at once too."""
    work = Workload(
        (
            AgentProgram("A", 0.0, (Call(90, 1, 0, "t", 500.0), Call(100, 1, 91, None, 0.0))),
            AgentProgram("B", 0.1, (Call(48, 40, 0, None, 0.0),)),
        )
    )
    engine = SimSchedulerConfig(kv_tokens=16 * 10, block_size=16)
    cfg = ReplayConfig(engine=engine, check=True, async_scheduling=async_scheduling)
    out = simulate(work, _static(100.0, "stall-only"), COST, cfg)
    calls = {(c.program, c.turn): c for c in out.calls}
    stats = out.engine.stats
    assert calls[("B", 0)].preemptions == 1 and stats.pins_released == 1
    assert calls[("B", 0)].finish < 10.0


def test_the_oracle_holds_its_pin_until_the_call_reaches_the_scheduler() -> None:
    """A's follow-up is sent 5 ms after A finishes, while B's 20 ms decode step runs; it
    reaches the scheduler at that step's end, and pins expire (at arrivals) before the
    arrival is seen. The oracle pins (5 ms is far below A's 80 ms rebuild) for the pause
    plus the longest step so far, so the pin is handed over, not expired. Regression: a
    pin of the bare pause expired 15 ms before its call arrived."""
    a = AgentProgram("A", 0.0, (Call(800, 1, 0, "t", 0.005), Call(820, 1, 801, None, 0.0)))
    b = AgentProgram("B", 0.0, (Call(16, 200, 0, None, 0.0),))
    work = Workload((a, b))
    pauses = {(p.program_id, i): c.pause_s for p in work.programs for i, c in enumerate(p.calls)}
    oracle = make(PolicySpec("oracle"), pauses, lambda t, o: 0.0)
    cfg = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=16 * 200, block_size=16), check=True)
    out = simulate(work, oracle, COST, cfg)
    calls = {(c.program, c.turn): c for c in out.calls}
    assert calls[("A", 1)].arrival - calls[("A", 0)].finish == pytest.approx(0.005)
    stats = out.engine.stats
    assert (stats.pins_made, stats.pins_hit, stats.pins_expired) == (1, 1, 0)


def test_the_oracle_keeps_to_the_pin_cap_it_is_given() -> None:
    """``--pin-cap`` caps the oracle's pins as it caps continuum's and static-ttl's: A's
    10-block context (a 5 ms pause, far below its rebuild) is pinned in a 20-block cache
    with no cap, and refused under a cap of a quarter of the cache (5 blocks).
    Regression: the oracle ignored the cap and pinned all 10 blocks."""
    a = AgentProgram("A", 0.0, (Call(160, 1, 0, "t", 0.005), Call(180, 1, 161, None, 0.0)))
    work = Workload((a,))
    pauses = {(p.program_id, i): c.pause_s for p in work.programs for i, c in enumerate(p.calls)}
    cfg = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=16 * 20, block_size=16), check=True)
    made_refused = []
    for cap in (None, 0.25):
        oracle = make(PolicySpec("oracle", pin_cap=cap), pauses, lambda t, o: 0.0)
        stats = simulate(work, oracle, COST, cfg).engine.stats
        made_refused.append((stats.pins_made, stats.pins_refused))
    assert made_refused == [(1, 0), (0, 1)]


def test_a_pinned_programs_call_goes_before_an_older_programs() -> None:
    """The queue's order as docs/method.md states it: a call whose program holds a pin goes
    before the call of a program that arrived earlier and holds none; once the pin is gone,
    the older program goes first again."""
    pol = TTLPolicy.create(PolicyParams(cold_start_ttl_s=5.0, k=0), lambda tokens, offload: 0.01)
    r = Retention(PolicySource(pol), free=lambda blocks: None, capacity_blocks=1000)
    old = r.arrive("o1", Tags("OLD", "bash", None), now=0.0)
    r.arrive("n1", Tags("NEW", "bash", None), now=1.0)
    assert r.finish("n1", OK, 100, now=2.0) > 0
    assert r.pin("n1", [1, 2, 3], 5.0, now=2.0)
    r.forget("n1")
    new = r.arrive("n2", Tags("NEW", "bash", None), now=3.0)
    assert r.key(new, preempted=False) < r.key(old, preempted=False)
    r.release("NEW", "expired")
    assert r.key(old, preempted=False) < r.key(new, preempted=False)
