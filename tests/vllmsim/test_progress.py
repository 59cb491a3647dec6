"""The vLLM backend tells a replay's progress as the fast one does (replay/progress.py):
rising counts of calls done that end at the trace's calls, one engine (the harness) and a
fleet (the fast fleet's loop over vLLM's schedulers); the document is unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from profiles.cost import ProfileCostModel
from profiles.shipped import resolve
from replay.policies import PolicySpec
from replay.policy_runs import Load
from replay.replay_run import replay_doc
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.vllmsim.run import run
from tests.replay.test_replay_progress import assert_rising_to_the_calls, request, told
from tests.tune.inputs import write_trace
from tests.vllmsim.drive import AbortFirst
from tests.vllmsim.stress import workload

COST = ProfileCostModel(resolve("llama-3.1-8b-h100")[0])


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_trace(tmp_path_factory.mktemp("progress") / "t.parquet", programs=5, seed=3)


@pytest.mark.parametrize("fleet", [False, True], ids=["one engine", "fleet"])
def test_the_vllm_backend_tells_the_calls_done(trace: Path, fleet: bool) -> None:
    req = request(trace, fleet=fleet, backend="vllm")
    by_policy, doc = told(req)
    assert doc == replay_doc(req)
    assert_rising_to_the_calls(by_policy, doc)


def test_an_aborted_call_counts_its_programs_later_calls_done() -> None:
    """A call aborted at a step boundary ends its program: its later calls are never sent,
    so they are done then, and the count still ends at the workload's calls (it ended one
    short per later call: the harness counted the aborted call alone)."""
    work = workload([[(64, 8, 0.5)] * 4, [(64, 8, 0.5)] * 2])

    told_counts: list[tuple[int, int]] = []
    config = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=100_000, block_size=16))
    got = run(
        work,
        PolicySpec("vllm"),
        COST,
        config,
        Load(),
        observer=AbortFirst(),
        progress=lambda done, total: told_counts.append((done, total)),
    )
    assert got.aborted_calls == 1 and len(got.calls) == 2  # p0 stopped at its first call
    assert told_counts[-1] == (work.calls, work.calls) == (6, 6)
