"""A replay's progress within each policy (replay/progress.py): the calls done, told with
rising counts that end at the workload's calls, on one engine and on a fleet, with
refused calls counted; the document is the same with and without it."""

from __future__ import annotations

from pathlib import Path

import pytest

from replay.figures import ReplayDoc
from replay.fleet.routers import RouterSettings
from replay.policy_runs import Load
from replay.progress import TELLS, CallTally
from replay.replay_run import ReplayRequest, replay_doc
from replay.scheduler import SimSchedulerConfig
from tests.tune.inputs import KV_TOKENS, PROFILE, write_trace


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_trace(tmp_path_factory.mktemp("progress") / "t.parquet", programs=12)


def request(
    trace: Path, *, kv_tokens: int = KV_TOKENS, fleet: bool = False, backend: str = "fast"
) -> ReplayRequest:
    return ReplayRequest(
        trace=trace,
        policies=["vllm,continuum"],
        load=Load(concurrency=4),
        engine=SimSchedulerConfig(kv_tokens=kv_tokens),
        profile=PROFILE,
        timed=False,
        replicas=3 if fleet else None,
        router=RouterSettings("cache-aware") if fleet else None,
        backend=backend,
    )


def told(req: ReplayRequest) -> tuple[dict[str, list[tuple[int, int]]], ReplayDoc]:
    """Each policy's (calls done, calls) as told, and the document."""
    by_policy: dict[str, list[tuple[int, int]]] = {}
    current: list[str] = []

    def policy(name: str, done: int, total: int) -> None:
        if done < total:  # ("done", n, n) once every policy ran
            current.append(name)
            by_policy[name] = []

    def calls(done: int, total: int) -> None:
        by_policy[current[-1]].append((done, total))

    doc = replay_doc(req, progress=policy, calls_done=calls)
    return by_policy, doc


@pytest.mark.parametrize("fleet", [False, True], ids=["one engine", "fleet"])
@pytest.mark.parametrize("kv_tokens", [KV_TOKENS, 5_000], ids=["all fit", "some refused"])
def test_counts_rise_to_the_calls_and_the_document_is_unchanged(
    trace: Path, fleet: bool, kv_tokens: int
) -> None:
    req = request(trace, kv_tokens=kv_tokens, fleet=fleet)
    by_policy, doc = told(req)
    assert doc == replay_doc(req)  # told or not, the same document
    assert_rising_to_the_calls(by_policy, doc)
    if kv_tokens < KV_TOKENS:  # the refused calls are counted done, or it ends short
        assert all(r["rejected_calls"] > 0 for r in doc["results"])


def assert_rising_to_the_calls(by_policy: dict[str, list[tuple[int, int]]], doc: ReplayDoc) -> None:
    """Each policy was told rising counts of the trace's calls, the last one all of them
    (finished or refused)."""
    calls = doc["trace"]["calls"]
    results = {r["policy"]: r for r in doc["results"]}
    assert set(by_policy) == set(results)
    for name, counts in by_policy.items():
        done = [d for d, _ in counts]
        assert len(counts) >= 2, counts
        assert done == sorted(set(done)), f"{name}: not rising: {done}"
        assert {t for _, t in counts} == {calls}
        assert done[-1] == calls, f"{name}: ended at {done[-1]} of {calls}"
        assert done[-1] == results[name]["llm_calls"] + results[name]["rejected_calls"]


def test_a_tally_tells_about_tells_times_and_never_a_count_twice() -> None:
    counts: list[int] = []
    total = 50 * TELLS + 7
    tally = CallTally(lambda done, _: counts.append(done), total)
    for finished in range(1, total + 1):  # one call finishes per step
        if finished >= tally.next_at:
            tally.told_at(finished, finished)
    tally.end(total)
    tally.end(total)
    assert counts[-1] == total and counts == sorted(set(counts))
    assert TELLS <= len(counts) <= TELLS + 2


def test_the_next_tell_counts_finished_calls_not_refused_ones() -> None:
    """The loops compare ``next_at`` with the calls finished: a tell at 10 finished (30
    done, 20 of them refused) is next due 5 finished calls on, at 15."""
    told: list[int] = []
    tally = CallTally(lambda done, _: told.append(done), 5 * TELLS)
    assert tally.told_at(10, 30) == 15 and told == [30]


def test_without_a_callback_the_loops_never_reach_next_at() -> None:
    tally = CallTally(None, 10)
    assert tally.next_at > 10**15
    tally.end(10)  # nothing to tell, and no error
