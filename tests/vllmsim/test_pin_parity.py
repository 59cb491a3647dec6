"""One set of pin rules (issue 11, item 3): the simulator's glue and the plugin's, fed one
event stream, make the same pin decisions at the same times.

Both replays run :class:`ttlctl.engine.retention.Retention` (the simulator through
``replay/pinning.py``, vLLM's scheduler through ``ttlctl.engine.TTLScheduler`` in the vLLM
backend's harness). Every pin made, handed over (a hit), expired, released by the valve,
dropped or refused is logged with its program and the virtual time of the rule call it
happened in, and the two logs must be equal (times to a relative 1e-9: the same sums in
another order).

Both backends run the same rules, so their agreement cannot show a fault in the rules
themselves: the log also checks them against an independent statement (:class:`Log`): at
every expiry check, exactly the pins made at ``t`` for ``τ`` with ``t + τ`` at or before now
whose program has no call waiting go; a pin is refused exactly when the other programs'
pinned blocks plus its own would pass ``pin_cap`` of the usable blocks.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profiles.cost import ProfileCostModel
from profiles.shipped import resolve
from replay.policies import PolicySpec
from replay.policy_runs import Load, simulate_one
from replay.scheduler import SimScheduler, SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.sim_outcome import Outcome
from replay.vllmsim.outcome import Outcome as VllmOutcome
from replay.vllmsim.run import run
from replay.workload import AgentProgram, Call, Workload
from tests.vllmsim.differential import Case, cases, continuum_bundles
from ttlctl.engine.calls import Live
from ttlctl.engine.retention import Retention
from ttlctl.engine.tags import Tags

COST = ProfileCostModel(resolve("llama-3.1-8b-h100")[0])

Event = tuple[str, str, float]


@dataclass
class Log:
    """The pin events of every :class:`Retention` while installed: (what, program, time)."""

    events: list[Event] = field(default_factory=list)
    now: float = 0.0
    #: program -> (made at, τ) of the pins held now, as the log saw them made
    held: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: where the rules broke the independent statement (class docstring)
    errors: list[str] = field(default_factory=list)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        log = self
        arrive, expire = Retention.arrive, Retention.expire
        admitted, finish = Retention.admitted, Retention.finish
        release, pin = Retention.release, Retention.pin

        def _arrive(
            self: Retention, request_id: Hashable, tags: Tags, now: float, request: Any = None
        ) -> Live:
            log.now = now
            return arrive(self, request_id, tags, now, request)

        def _expire(self: Retention, now: float, waiting: Any) -> int:
            log.now = now
            due = {
                program
                for program, (made, ttl) in log.held.items()
                if program in self.pins and made + ttl <= now and not waiting(program)
            }
            n = len(log.events)
            released = expire(self, now, waiting)
            went = {p for what, p, _ in log.events[n:] if what == "expired"}
            if went != due:
                log.errors.append(f"at {now}: expired {sorted(went)}, due {sorted(due)}")
            return released

        def _admitted(self: Retention, request_id: Hashable, now: float, cached: Any) -> None:
            log.now = now
            admitted(self, request_id, now, cached)

        def _finish(self: Retention, request_id: Hashable, how: str, ctx: int, now: float) -> float:
            log.now = now
            return finish(self, request_id, how, ctx, now)

        def _release(self: Retention, program: str, reason: str) -> bool:
            done = release(self, program, reason)
            if done:
                log.events.append((reason, program, log.now))
                log.held.pop(program, None)
            return done

        def _pin(
            self: Retention, request_id: Hashable, blocks: Sequence[Any], ttl: float, now: float
        ) -> bool:
            log.now = now
            refused = self.counters.refused
            program = str(self.live[request_id].tags.program)
            others = sum(p.n_blocks for p in self.pins.pins.values() if p.program != program)
            source = self.source
            over = (
                source is not None
                and ttl > 0
                and len(blocks) > 0
                and (others + len(blocks) > source.params.pin_cap * self.capacity_blocks)
            )
            made = pin(self, request_id, blocks, ttl, now)
            if made:
                log.events.append(("made", program, now))
                log.held[program] = (now, ttl)
            elif self.counters.refused > refused:
                log.events.append(("refused", program, now))
            if over != (self.counters.refused > refused):
                log.errors.append(f"at {now}: {program} pin made={made}, over the cap={over}")
            return made

        expire_pins = SimScheduler.expire_pins

        def _expire_pins(self: SimScheduler, now: float) -> None:
            # a step starts: the simulator enters the rules' expiry only when a pin is due,
            # the plugin at every schedule(); the valve's releases in the step happen now
            log.now = now
            expire_pins(self, now)

        monkeypatch.setattr(SimScheduler, "expire_pins", _expire_pins)
        for name, f in [
            ("arrive", _arrive),
            ("expire", _expire),
            ("admitted", _admitted),
            ("finish", _finish),
            ("release", _release),
            ("pin", _pin),
        ]:
            monkeypatch.setattr(Retention, name, f)

    def take(self) -> list[Event]:
        assert not self.errors, self.errors[:5]
        out, self.events = self.events, []
        self.held.clear()
        return out


def both(case: Case, log: Log) -> tuple[list[Event], list[Event]]:
    """The pin events of ``case`` on the fast backend and on vLLM's scheduler."""
    fast, ours, _, _ = replayed(case, log)
    return fast, ours


def replayed(case: Case, log: Log) -> tuple[list[Event], list[Event], Outcome, VllmOutcome]:
    """:func:`both`, with each backend's outcome."""
    log.take()
    fast, _ = simulate_one(case.workload, case.spec, COST, case.config, case.load)
    fast_events = log.take()
    ours = run(case.workload, case.spec, COST, case.config, case.load)
    return fast_events, log.take(), fast, ours


def assert_same(fast: list[Event], ours: list[Event]) -> None:
    assert [e[:2] for e in fast] == [e[:2] for e in ours]
    for x, y in zip(fast, ours, strict=True):
        assert math.isclose(x[2], y[2], rel_tol=1e-9, abs_tol=1e-12), (x, y)


# ---------------------------------------------------------------------- designed streams


def _program(name: str, start: float, calls: list[tuple[int, int, int, float]]) -> AgentProgram:
    return AgentProgram(
        name,
        start,
        tuple(
            Call(prompt, output, reused, None if i == len(calls) - 1 else "bash", pause)
            for i, (prompt, output, reused, pause) in enumerate(calls)
        ),
    )


#: name -> (programs, blocks, ttl, valve, pin cap, what the stream must show)
STREAMS = {
    # A pins, comes back within τ: a hit; B pins and never comes back in time: B's pin
    # expires at an arrival (the engine is idle meanwhile: no step expires it earlier)
    "hit, and expiry at an arrival": (
        [
            _program("A", 0.0, [(100, 8, 0, 0.2), (130, 8, 108, 0.0)]),
            _program("B", 0.0, [(90, 8, 0, 9.0), (120, 8, 98, 0.0)]),
            _program("C", 5.0, [(40, 4, 0, 0.0)]),
        ],
        64,
        2.0,
        "head",
        None,
        {"made", "hit", "expired"},
    ),
    # three programs pin 12 blocks each in a 40-block cache; D's call needs more than is
    # free: the head valve releases the latest program's pin first
    "the head valve, latest program first": (
        [
            _program("A", 0.0, [(180, 4, 0, 3.0), (200, 4, 184, 0.0)]),
            _program("B", 0.01, [(180, 4, 0, 3.0), (200, 4, 184, 0.0)]),
            _program("C", 0.02, [(180, 4, 0, 3.0), (200, 4, 184, 0.0)]),
            _program("D", 0.5, [(300, 4, 0, 0.0)]),
        ],
        40,
        10.0,
        "head",
        None,
        {"made", "released", "hit"},
    ),
    # the same under stall-only, with E decoding when D arrives: no pin is released while E
    # runs, and A, B and C come back (first in the queue: pinned, older) to hit theirs
    "the stall-only valve": (
        [
            _program("A", 0.0, [(180, 4, 0, 3.0), (200, 4, 184, 0.0)]),
            _program("B", 0.01, [(180, 4, 0, 3.0), (200, 4, 184, 0.0)]),
            _program("C", 0.02, [(180, 4, 0, 3.0), (200, 4, 184, 0.0)]),
            _program("E", 0.03, [(20, 200, 0, 0.0)]),
            _program("D", 0.5, [(300, 4, 0, 0.0)]),
        ],
        56,
        10.0,
        "stall-only",
        None,
        {"made", "hit"},
    ),
    # a pin cap of a quarter of the cache: the second and third pins are refused
    "the pin cap": (
        [
            _program("A", 0.0, [(180, 4, 0, 1.0), (200, 4, 184, 0.0)]),
            _program("B", 0.01, [(180, 4, 0, 1.0), (200, 4, 184, 0.0)]),
        ],
        48,
        10.0,
        "head",
        0.25,
        {"made", "refused", "hit"},
    ),
    # A comes back exactly τ after its finish on an idle engine: its pin's expiry is the
    # arrival's instant, and a pin whose expiry is at or before now goes (then the call
    # arrives, finds no pin, and hits the blocks the pool still caches)
    "expiry at the arrival's instant": (
        [_program("A", 0.0, [(100, 8, 0, 2.0), (130, 8, 108, 0.0)])],
        64,
        2.0,
        "head",
        None,
        {"made", "expired"},
    ),
    # nothing runs when P's second call arrives; it does not fit beside both pins: R's pin
    # goes first, and P's own pin (released last) is handed over to P's call
    "the head's own pin last, another's first": (
        [
            _program("R", 0.0, [(40, 1, 0, 30.0), (60, 1, 41, 0.0)]),
            _program("P", 0.01, [(40, 1, 0, 0.5), (140, 4, 41, 0.0)]),
        ],
        11,
        20.0,
        "head",
        None,
        {"made", "released", "hit"},
    ),
    # the head's own pin holds the blocks its call needs, nothing runs: released last
    "the head's own pin when nothing runs": (
        [
            _program("P", 0.0, [(6, 1, 0, 0.1), (75, 4, 7, 0.0)]),
            _program("Q", 5.0, [(4, 1, 0, 0.0)]),
        ],
        5,
        2.0,
        "head",
        None,
        {"made", "released"},
    ),
}


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_designed_streams(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    programs, blocks, ttl, valve, cap, shown = STREAMS[name]
    bs = 16
    engine = SimSchedulerConfig(kv_tokens=blocks * bs, block_size=bs, max_model_len=4096)
    case = Case(
        Workload(tuple(programs)),
        ReplayConfig(engine=engine),
        Load(),
        PolicySpec("static-ttl", ttl_s=ttl, valve=valve, pin_cap=cap),
    )
    log = Log()
    log.install(monkeypatch)
    fast, ours, fast_out, ours_out = replayed(case, log)
    assert {what for what, _, _ in ours} == shown, ours
    # the replays' own pin counts: the cap's refusals as the events show them, on both
    refused = sum(1 for what, _, _ in ours if what == "refused")
    assert fast_out.engine.stats.pins_refused == ours_out.engine.stats.pins_refused == refused
    released = [program for what, program, _ in ours if what == "released"]
    if "valve" in name:
        assert released == (["C", "B"] if "head" in name else []), ours
    if "another's first" in name:
        assert released == ["R"], ours
    assert_same(fast, ours)


def test_an_idle_engine_keeps_its_pins_until_the_next_arrival(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """B's pin (τ 2 s) expires at C's arrival at t = 5 s, not at its own expiry: nothing
    steps in between (on both backends), and the pinned block-seconds say so."""
    programs, blocks, ttl, valve, cap, _ = STREAMS["hit, and expiry at an arrival"]
    case = Case(
        Workload(tuple(programs)),
        ReplayConfig(engine=SimSchedulerConfig(kv_tokens=blocks * 16, max_model_len=4096)),
        Load(),
        PolicySpec("static-ttl", ttl_s=ttl, valve=valve, pin_cap=cap),
    )
    log = Log()
    log.install(monkeypatch)
    fast, ours = both(case, log)
    expired = [e for e in ours if e[0] == "expired"]
    assert [(what, program) for what, program, _ in expired] == [("expired", "B")]
    assert expired[0][2] == pytest.approx(5.0)
    assert_same(fast, ours)


def test_a_pin_due_in_the_step_that_empties_the_engine_goes_at_its_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pins at its finish and pauses 30 s; Z decodes on alone, and A's pin falls due
    0.1 ms before the end of Z's last step. That step leaves nothing to run, and vLLM's
    engine core schedules once more to report Z's finish: the plugin expires A's pin
    then, at Z's finish, not at A's return 30 s later. The fast engine does the same, and
    both backends' pinned block-seconds and pin timelines agree."""
    programs = (
        _program("A", 0.0, [(100, 4, 0, 30.0), (130, 4, 104, 0.0)]),
        _program("Z", 0.0, [(50, 200, 0, 0.0)]),
    )
    engine = SimSchedulerConfig(kv_tokens=64 * 16, block_size=16, max_model_len=4096)

    def case(ttl: float) -> Case:
        spec = PolicySpec("static-ttl", ttl_s=ttl, valve="head")
        return Case(Workload(programs), ReplayConfig(engine=engine), Load(), spec)

    wide = case(1000.0)  # A's pin outlives the run: the finish times to place τ by
    probe, _ = simulate_one(wide.workload, wide.spec, COST, wide.config, wide.load)
    finish = {(c.program, c.turn): c.finish for c in probe.calls}
    z_end, a_end = finish[("Z", 0)], finish[("A", 0)]
    chosen = case(z_end - a_end - 1e-4)
    log = Log()
    log.install(monkeypatch)
    fast_events, ours_events, fast, ours = replayed(chosen, log)
    expired = [e for e in ours_events if e[0] == "expired"]
    assert [(what, program) for what, program, _ in expired] == [("expired", "A")]
    assert expired[0][2] == pytest.approx(z_end, rel=1e-9)
    assert_same(fast_events, ours_events)
    u, v = fast.engine.stats.pinned_block_seconds, ours.engine.stats.pinned_block_seconds
    assert u == pytest.approx(v, rel=1e-9)
    assert u == pytest.approx(7 * (z_end - a_end), rel=1e-6)  # A's 7 blocks until Z's end
    s, t = fast.engine.timeline, ours.engine.timeline
    assert [n for _, n in s] == [n for _, n in t]
    assert [x for x, _ in s] == pytest.approx([x for x, _ in t], rel=1e-9)


# ---------------------------------------------------------------------- random streams


@pytest.fixture(scope="module")
def bundles(fit_doc: dict[str, Any]) -> dict[str, Any]:
    return continuum_bundles(fit_doc, COST)


def test_random_streams(monkeypatch: pytest.MonkeyPatch, bundles: dict[str, Any]) -> None:
    log = Log()
    log.install(monkeypatch)

    @settings(
        max_examples=25,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.data())
    def one(data: st.DataObject) -> None:
        case = data.draw(cases(bundles, pressure=True))
        fast, ours = both(case, log)
        assert_same(fast, ours)

    one()
