"""TTLScheduler under async scheduling in the vLLM backend's harness (issue 11, item 4).

Random small workloads with tight memory (preemptions, and output in flight when a
request is preempted), aborts at step boundaries, programs whose last call does not
say so (the plugin pins it and the program never returns), and the bundle replaced
mid-run. Every step: no pinned block outlives its τ by more than one step (a pin past
its expiry at a step start is kept only while its program has a request waiting in
vLLM's own queue); at the end the plugin's state is empty or bounded and every block
is back in vLLM's pool.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from replay.vllmsim.run import run
from tests.vllmsim.drive import COST, static_params
from tests.vllmsim.stress import DRAWN, Checker, check_end, setup

calls = st.lists(
    st.tuples(
        st.integers(1, 120),  # new prompt tokens
        st.integers(1, 40),  # output tokens
        st.sampled_from([0.0, 0.01, 0.3, 2.0]),  # pause
    ),
    min_size=1,
    max_size=4,
)


@st.composite
def cases(draw: st.DrawFn) -> dict[str, object]:
    programs = draw(st.lists(calls, min_size=1, max_size=6))
    keys = [(f"p{p}", t) for p, cs in enumerate(programs) for t in range(len(cs))]
    return {
        "programs": programs,
        "blocks": draw(st.integers(8, 40)),
        "ttl_s": draw(st.sampled_from([0.05, 0.5, 3.0])),
        "valve": draw(st.sampled_from(["head", "stall-only"])),
        "policy": draw(st.sampled_from(["static-ttl", "continuum"])),
        "concurrency": draw(st.sampled_from([None, 1, 3])),
        "align": draw(st.sampled_from([1, 16])),
        "aborts": frozenset(draw(st.lists(st.sampled_from(keys), max_size=3))),
        "untagged": frozenset(
            draw(st.lists(st.sampled_from([f"p{p}" for p in range(len(programs))]), max_size=2))
        ),
        "swap_at": draw(st.sampled_from([None, 3, 20])),
        "swap_ttl_s": draw(st.sampled_from([0.02, 1.0])),
    }


def replay(case: dict[str, object], checker: Checker, async_scheduling: bool = True) -> None:
    programs = case["programs"]
    assert isinstance(programs, list) and isinstance(case["blocks"], int)
    ttl_s = float(case["ttl_s"])  # type: ignore[arg-type]
    work, spec, config, load = setup(case)
    outcome = run(
        work,
        spec,
        COST,
        config,
        load,
        async_scheduling=async_scheduling,
        untagged_last=case["untagged"],  # type: ignore[arg-type]
        observer=checker,
        plugin_env=PLUGIN_ENV,
    )
    done = {(c.program, c.turn) for c in outcome.calls}
    assert len(done) == len(outcome.calls)
    if checker.harness is not None:
        # cold-start continuum pins for at most ln B: far below this on the tiny profile
        check_end(outcome.end, checker.harness.scheduler, max(ttl_s, 1.0) + 60.0, len(programs))


#: the plugin's server settings: a replaced bundle loads at once, the program book stays
#: within 4 programs
PLUGIN_ENV = {"TTLCTL_BUNDLE_CHECK_S": "0", "TTLCTL_MAX_PROGRAMS": "4"}


@settings(DRAWN, max_examples=25)
@given(case=cases())
def test_async_plugin_keeps_no_pin_past_its_ttl_and_stays_bounded(case: dict[str, object]) -> None:
    swap_at = case["swap_at"]
    checker = Checker(
        aborts=case["aborts"],  # type: ignore[arg-type]
        swap_at=swap_at if isinstance(swap_at, int) else None,
        swap_to=static_params(float(case["swap_ttl_s"]), valve="stall-only"),  # type: ignore[arg-type]
    )
    replay(case, checker)


def test_a_contended_async_run_sees_every_hazard(tmp_path: Path) -> None:
    """One fixed run that is known to preempt requests with output in flight (some stop
    on it), abort calls in flight, keep expired pins for waiting follow-ups, pin calls
    whose programs never return, and reload a replaced bundle: the invariants hold."""
    case: dict[str, object] = {
        "programs": [
            [(48, 17, 0.01), (31, 3, 0.3)],
            [(48, 17, 0.0), (47, 17, 0.0), (15, 1, 0.01)],
            [(32, 1, 0.3), (15, 17, 0.0), (31, 3, 0.0)],
            [(48, 3, 0.3), (45, 3, 0.01)],
            [(16, 2, 0.3), (14, 1, 0.01), (31, 1, 0.3), (47, 17, 0.3)],
            [(48, 1, 0.0), (15, 3, 0.01), (29, 1, 0.3)],
        ],
        "blocks": 15,
        "ttl_s": 3.0,
        "valve": "stall-only",
        "policy": "static-ttl",
        "concurrency": 6,
        "aborts": frozenset({("p3", 0), ("p2", 2)}),
        "untagged": frozenset({"p1", "p3"}),
        "swap_at": 12,
        "swap_ttl_s": 0.02,
    }
    checker = Checker(
        aborts=case["aborts"],  # type: ignore[arg-type]
        swap_at=12,
        swap_to=static_params(0.02, valve="stall-only"),
    )
    replay(case, checker)
    assert checker.harness.scheduler.ttl_watcher.reloads == 1
    seen = checker.seen
    hazards = (
        "preemptions",
        "stale_in_flight",
        "stopped_on_stale_output",
        "kept_for_follow_up",
        "aborted_in_flight",
        "bundle_written",
    )
    for hazard in hazards:
        assert seen[hazard] > 0, (hazard, dict(seen))
    assert seen["aborted"] + seen["aborted_in_flight"] == 2
