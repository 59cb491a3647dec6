"""The fast fleet checked against a fleet of vLLM schedulers, call by call (issue 19 §1).

Random small workloads (``differential.cases``: vllm, program-fcfs, static-ttl and
continuum, mixed, under pressure, with prefixes shared across programs) on 2 or 3
replicas behind the deterministic routers (round-robin, consistent-hash, cache-aware,
pin-aware, kv-aware): every call goes to the same replica, is admitted in the same step
there, hits the same prefix, is preempted as often and finishes in the same step at the
same time; its route (previous replica, that call's pin and whether it was still held) is
the same, and so are each replica's pins, its pinned block-seconds and the fleet's pins
wasted (``fleet_differential``), but for the deviation of the fast fleet's model that
``fleet_differential.deviations`` bounds (a router's stale view of a replica waiting in a
decode run).

``TTLCTL_DIFF_EXAMPLES`` scales the number of cases (default 40, as the single-engine
comparison's).
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from profiles.cost import ProfileCostModel
from profiles.shipped import resolve
from replay.policies import PolicySpec
from replay.policy_runs import Load
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.workload import AgentProgram, Call, Workload
from tests.vllmsim.differential import Case, cases, continuum_bundles
from tests.vllmsim.fleet_differential import (
    FleetCase,
    ViewLog,
    compare_fleets,
    deviations,
    fleet_cases,
    run_fleets,
)

COST = ProfileCostModel(resolve("llama-3.1-8b-h100")[0])
EXAMPLES = int(os.environ.get("TTLCTL_DIFF_EXAMPLES", "40"))


@pytest.fixture(scope="module")
def bundles(fit_doc: dict[str, Any]) -> dict[str, Any]:
    return continuum_bundles(fit_doc, COST)


def check(fc: FleetCase, *, async_scheduling: bool = False) -> int:
    log = ViewLog()
    with log.watching():
        fast, ours = run_fleets(fc, COST, log, async_scheduling=async_scheduling)
    calls, diffs = compare_fleets(fast, ours)
    diffs = deviations(diffs, log, fast)
    shown = "\n".join(f"  {d.call} {d.metric}: fast {d.fast}, vllm {d.vllm}" for d in diffs[:12])
    assert not diffs, f"{fc.describe()}\n{shown}"
    return calls


def agree(
    examples: int,
    drawn: st.SearchStrategy[FleetCase],
    *,
    async_scheduling: bool = False,
    tags: str | None = None,
) -> None:
    """``examples`` fleet cases of ``drawn`` (derandomized: the same every run), each
    replayed on both fleets and compared call by call (:func:`check`); ``tags``: the
    clients tag so (``--client-tags``). Some calls were compared: not a vacuous pass."""
    seen: list[int] = []

    @settings(
        max_examples=max(1, examples),
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.data())
    def one(data: st.DataObject) -> None:
        fc = data.draw(drawn)
        if tags is not None:
            fc = replace(
                fc, case=replace(fc.case, config=replace(fc.case.config, client_tags=tags))
            )
        seen.append(check(fc, async_scheduling=async_scheduling))

    one()
    assert sum(seen) > 0  # calls were compared


@pytest.mark.parametrize(
    ("pressure", "shared"),
    [(False, False), (True, False), (False, True)],
    ids=["mixed", "pressure", "shared"],
)
def test_fleets_agree_call_by_call(bundles: dict[str, Any], pressure: bool, shared: bool) -> None:
    agree(
        EXAMPLES // (2 if not pressure else 4),
        fleet_cases(cases(bundles, pressure=pressure, shared=shared)),
    )


@pytest.mark.parametrize("tags", ["tool", "none"])
def test_fleets_of_clients_that_tag_less_agree_call_by_call(
    bundles: dict[str, Any], tags: str
) -> None:
    """``--client-tags tool`` and ``none``: the fleet loop's requests are tagged so on
    both sides (each vLLM replica is sent the same ``vllm_xargs``)."""
    agree(EXAMPLES // 8, fleet_cases(cases(bundles, pressure=True)), tags=tags)


def test_a_fleet_under_a_watermark_agrees_call_by_call() -> None:
    """vLLM's ``--watermark`` on every replica: four one-call programs of 6-block prompts,
    two per replica (round-robin), 12 blocks each. Keeping 3 blocks free (a quarter of 13,
    vLLM's null block counted) while a request runs, each replica's second program waits
    for its first to finish, where without the watermark both start at once; the fast
    fleet and vLLM's schedulers agree call by call either way."""
    work = Workload(
        tuple(AgentProgram(p, 0.0, (Call(96, 16, 0, None, 0.0),)) for p in ("a", "b", "c", "d"))
    )
    engine = SimSchedulerConfig(kv_tokens=12 * 16, block_size=16, max_model_len=2048)
    admitted = {}
    for share in (0.0, 0.25):
        config = ReplayConfig(engine=replace(engine, watermark=share))
        fc = FleetCase(Case(work, config, Load(), PolicySpec("vllm")), 2, "round-robin")
        assert check(fc) == 4
        fast, _ = run_fleets(fc, COST)
        admitted[share] = {r.program: (r.admitted_step, r.finish_step) for r in fast.calls}
    assert all(step == 0 for step, _ in admitted[0.0].values())
    waited = admitted[0.25]
    assert waited["a"][0] == waited["b"][0] == 0
    assert waited["c"][0] > waited["a"][1] and waited["d"][0] > waited["b"][1]


@pytest.mark.parametrize("pressure", [False, True], ids=["mixed", "pressure"])
def test_async_fleets_agree_call_by_call(bundles: dict[str, Any], pressure: bool) -> None:
    """With async scheduling on every replica (vLLM's ``AsyncScheduler`` and the engine
    core's batch queue of two; the fast fleet's ``AsyncSimScheduler``), under the same
    bounds."""
    agree(EXAMPLES // 4, fleet_cases(cases(bundles, pressure=pressure)), async_scheduling=True)
