"""The collector's regime during a replay (replay.collector): set inside, restored after."""

from __future__ import annotations

import gc
import multiprocessing
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor

import pytest

from profiles.cost import ProfileCostModel
from profiles.shipped import resolve
from replay.collector import YOUNG_THRESHOLD, freeze_built, replay_collector
from replay.fleet.routers import RouterSettings
from replay.fleet.run import FleetSpec, runner
from replay.policies import PolicySpec
from replay.policy_runs import Load, run_one
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.synth import synth
from replay.workload import from_frame


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    """Each test starts from a heap nothing froze (an engine built in this process before
    may have frozen it) and the default thresholds, and leaves them so."""
    gc.unfreeze()
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


def test_regime_inside_and_restored_after() -> None:
    before = gc.get_threshold()
    kept = [[], {"k": []}]  # tracked objects that exist when the replay starts
    with replay_collector():
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *before[1:])
        assert gc.get_freeze_count() > 0
        collected = {id(o) for o in gc.get_objects()}  # frozen objects are left out
        assert all(gc.is_tracked(o) and id(o) not in collected for o in kept)
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_restored_when_the_replay_fails() -> None:
    before = gc.get_threshold()
    try:
        with replay_collector():
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_a_callers_freeze_and_disabled_collector_are_left_alone() -> None:
    gc.disable()
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with replay_collector():
            assert 0 < gc.get_freeze_count() <= frozen  # nothing more frozen (some freed)
            assert not gc.isenabled()
        assert gc.get_freeze_count() > 0 and not gc.isenabled()  # nor thawed
    finally:
        gc.unfreeze()
        gc.enable()


def test_nested_replays_share_one_regime() -> None:
    before = gc.get_threshold()
    with replay_collector():
        with replay_collector():
            assert gc.get_threshold()[0] == YOUNG_THRESHOLD
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD  # the outer replay's still
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_a_collector_switched_off_by_threshold_stays_off() -> None:
    before = gc.get_threshold()
    gc.set_threshold(0, *before[1:])
    try:
        with replay_collector():
            assert gc.get_threshold()[0] == 0
        assert gc.get_threshold() == (0, *before[1:])
    finally:
        gc.set_threshold(*before)


def _collected(objects: list[object]) -> list[bool]:
    """Whether a collection would traverse each of ``objects`` (frozen ones it would not)."""
    seen = {id(o) for o in gc.get_objects()}
    return [id(o) in seen for o in objects]


def test_what_a_replay_builds_before_its_loop_is_frozen_with_the_workload() -> None:
    with replay_collector():
        built = [[], {"k": []}]  # the replay's engines, runs and prompts
        assert _collected(built) == [True, True]  # young: the next collection would look
        freeze_built()
        assert _collected(built) == [False, False]
        in_loop = [[]]  # what the loop makes afterwards is collected as before
        assert _collected(in_loop) == [True]
    assert gc.get_freeze_count() == 0  # thawed with the rest when the replay ends
    assert _collected(built) == [True, True]


def test_freeze_built_does_nothing_outside_a_replay_or_under_a_callers_freeze() -> None:
    with replay_collector():
        pass  # a replay ran before, froze the heap and thawed it
    loose = [[]]
    freeze_built()  # no replay under way now
    assert gc.get_freeze_count() == 0 and _collected(loose) == [True]
    gc.freeze()  # a caller froze the heap: the regime freezes nothing, now or later
    try:
        with replay_collector():
            built = [[]]
            freeze_built()
            assert _collected(built) == [True]
    finally:
        gc.unfreeze()


def _freeze_counts(replicas: int) -> tuple[int, list[int], int]:
    """A replay of six programs (one engine's loop, or a fleet of ``replicas``) inside a
    regime: the frozen objects as it began, at each progress told, and the programs."""
    work = from_frame(synth("swe-bench", 6, 1))
    cost = ProfileCostModel(resolve("llama-3.1-8b-h100")[0])
    config = ReplayConfig(engine=SimSchedulerConfig(kv_tokens=600_000))
    run = run_one if replicas == 0 else runner(FleetSpec(replicas, RouterSettings("round-robin")))
    seen: list[int] = []
    with replay_collector():
        base = gc.get_freeze_count()
        run(
            work, PolicySpec("vllm"), cost, config, Load(concurrency=4), timed=False,
            progress=lambda done, total: seen.append(gc.get_freeze_count()),
        )  # fmt: skip
    return base, seen, len(work.programs)


REPLICAS = [0, 2]


@pytest.fixture(scope="module")
def freeze_counts() -> dict[int, tuple[int, list[int], int]]:
    """:func:`_freeze_counts` of each of :data:`REPLICAS`, replayed in a fresh interpreter:
    each count walks every frozen object, and this process's heap holds what the tests
    before it built (14 s a replay in the whole suite, 0.3 s alone)."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return dict(zip(REPLICAS, pool.map(_freeze_counts, REPLICAS), strict=True))


@pytest.mark.parametrize("replicas", REPLICAS)
def test_each_replay_loop_freezes_what_it_built_before_it(
    replicas: int, freeze_counts: dict[int, tuple[int, list[int], int]]
) -> None:
    """One engine's loop and the fleet's call :func:`freeze_built` once set up: inside a
    regime already frozen, the replay's engines, runs (and a fleet's prompts) join the
    frozen objects by the time the loop tells its progress (frozen objects only leave as
    they are freed, so without the call the count could only fall)."""
    base, seen, programs = freeze_counts[replicas]
    # at least the programs' runs joined (the engine's parts too; how many more depends on
    # what a replay builds, not on this regime)
    assert seen and min(seen) >= base + programs
