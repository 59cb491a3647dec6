"""The plugin's engine log on vLLM's own scheduler (in process, no model): the engine's
facts (issue 22), the pins vLLM's deferred frees prevent, and a bad
``TTLCTL_MAX_PROGRAMS`` (issue 18, section 5)."""

from __future__ import annotations

import json
import logging
import tempfile
from collections import deque
from pathlib import Path
from typing import Any

import pytest
import vllm
from vllm.config import KVTransferConfig
from vllm.distributed.kv_transfer.kv_connector.v1.example_connector import ExampleConnector
from vllm.sampling_params import SamplingParams
from vllm.v1.core.sched.request_queue import SchedulingPolicy
from vllm.v1.outputs import KVConnectorOutput
from vllm.v1.request import Request

from replay.vllmsim import build as build_mod
from tests.vllmsim.drive import Driver, _Outputs, driver, static_params, write_bundle
from ttlctl import bundle as bundle_mod
from ttlctl.engine.programs import DEFAULT_CAP


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_the_log_starts_with_the_engines_facts(tmp_path: Path) -> None:
    log = tmp_path / "engine.jsonl"
    d = driver(
        tmp_path,
        static_params(5.0),
        blocks=40,
        async_scheduling=False,
        env={"TTLCTL_LOG": str(log), "TTLCTL_REPLICA": " r-7 "},
    )
    facts = _lines(log)
    assert len(facts) == 1
    f = facts[0]
    served = bundle_mod.read(tmp_path / "bundle.json")
    assert f["schema"] == "ttlctl.engine-log/1" and f["kind"] == "engine"
    assert (f["block_size"], f["kv_blocks"], f["kv_tokens"]) == (16, 40, 640)
    assert (f["max_num_seqs"], f["max_num_batched_tokens"], f["max_model_len"]) == (8, 512, 512)
    assert f["async_scheduling"] is False and f["prefix_caching"] is True
    assert f["bundle_sha256"] == served["sha256"] and f["replica"] == "r-7"
    assert f["vllm_version"] == vllm.__version__ and f["model"]
    d.add("A", "a", 40, 2)
    d.update(d.schedule())
    d.update(d.schedule())
    assert [x.get("kind") for x in _lines(log)] == ["engine", None]
    # a new bundle: the facts are stated again, with its sha256
    write_bundle(tmp_path / "bundle.json", static_params(9.0))
    d.now += 60.0  # past the watcher's next look at the file
    d.sched.schedule()
    assert d.sched.ttl_watcher.reloads == 1
    again = _lines(log)[-1]
    assert again["kind"] == "engine" and again["replica"] == "r-7"
    assert again["bundle_sha256"] == bundle_mod.read(tmp_path / "bundle.json")["sha256"]
    assert again["bundle_sha256"] != f["bundle_sha256"] and again["kv_tokens"] == 640


def _with_consumer_connector(monkeypatch: pytest.MonkeyPatch, store: Path) -> None:
    """Every engine built gets vLLM's ExampleConnector as a KV consumer: under async
    scheduling vLLM then defers freeing a finished request's blocks while a step that
    scheduled it may still write them (``Scheduler.defer_block_free``)."""
    made = build_mod.vllm_config

    def with_connector(engine: Any, *, async_scheduling: bool, plugin: bool) -> Any:
        config = made(engine, async_scheduling=async_scheduling, plugin=plugin)
        config.kv_transfer_config = KVTransferConfig(
            kv_connector="ExampleConnector",
            kv_role="kv_both",
            kv_connector_extra_config={"shared_storage_path": str(store)},
        )
        config.scheduler_config.disable_hybrid_kv_cache_manager = True  # the connector's need
        return config

    monkeypatch.setattr(build_mod, "vllm_config", with_connector)


def _run(d: Driver) -> None:
    """The engine core's batch-queue loop (depth 2) until nothing is left."""
    queue: deque[Any] = deque()
    for _ in range(200):
        if not d.sched.has_requests() and not queue:
            return
        if d.sched.has_requests():
            queue.appendleft(d.schedule())
            if len(queue) < 2:
                continue
        d.now += 0.01
        d.update(queue.pop())
    raise AssertionError("the engine did not drain")


def test_a_deferred_free_is_not_pinned_but_counted_and_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stop token ends the call while the next step (scheduled ahead, async) still holds
    it: vLLM defers the free, so the plugin cannot pin; the pin is counted ``deferred`` and
    the call's log line says so."""
    _with_consumer_connector(monkeypatch, Path(tempfile.mkdtemp(dir=tmp_path)))
    log = tmp_path / "engine.jsonl"
    d = driver(tmp_path, static_params(5.0), blocks=40, env={"TTLCTL_LOG": str(log)})
    assert d.sched.defer_block_free and type(d.sched).__name__ == "TTLAsyncScheduler"
    d.calls["A"] = _Outputs(list(range(20_000, 20_010)))
    xargs = {"program_id": "a", "tool": "bash", "is_last": 0}
    params = SamplingParams(
        max_tokens=10, ignore_eos=True, stop_token_ids=[20_002], extra_args=xargs
    )
    d.sched.add_request(
        Request("A", list(range(10_000, 10_040)), params, None, 0.0, block_hasher=d.built.hasher)
    )
    _run(d)
    stats = d.sched.ttl_stats()
    assert stats["deferred"] == 1 and stats["made"] == 0 and "a" not in d.sched.ttl.pins
    assert not d.sched.deferred_frees  # vLLM freed them itself
    call = _lines(log)[-1]
    assert call["program_id"] == "a" and call["output_tokens"] == 3
    assert call["pin_skipped"] == "deferred" and call["ttl_s"] == 0.0


def test_the_facts_name_the_schedulers_other_settings_and_its_connector(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The settings a replay does not model are stated as vLLM holds them (the defaults
    here: FCFS, no active-batch or queue cap, no prefill cap, prefill every step), and the
    KV connector by its name; a setting the installed release lacks is null."""
    log = tmp_path / "engine.jsonl"
    driver(tmp_path, static_params(5.0), blocks=40, env={"TTLCTL_LOG": str(log)})
    plain = _lines(log)[0]
    assert plain["scheduling_policy"] == "fcfs" and plain["kv_connector"] is None
    assert plain["max_num_active_seqs"] is None and plain["max_num_queued_reqs"] is None
    assert plain["long_prefill_token_threshold"] == 0
    assert plain["long_prefill_token_threshold_adaptive"] is False
    assert plain["prefill_schedule_interval"] == 1
    has_window = hasattr(vllm.config.SchedulerConfig, "cache_aware_admission_window")
    assert (plain["cache_aware_admission_window"] == 0) is has_window
    assert (plain["cache_aware_admission_threshold"] == 0.5) is has_window
    assert plain["max_num_inflight_kv_loads"] is None
    assert plain["scheduler_reserve_full_isl"] is True and plain["enable_chunked_prefill"] is True
    assert plain["max_num_scheduled_tokens"] in (None, 512)  # unset, or the token budget
    assert plain["watermark"] == 0.0 and plain["max_num_queued_tokens"] is None
    # with a connector and an asynchronous-load cap (vLLM 0.34's; set by hand on an older
    # release, whose scheduler ignores it): named, and warned of under a policy
    made = build_mod.vllm_config
    _with_consumer_connector(monkeypatch, Path(tempfile.mkdtemp(dir=tmp_path)))
    with_connector = build_mod.vllm_config

    def with_loads(engine: Any, *, async_scheduling: bool, plugin: bool) -> Any:
        config = with_connector(engine, async_scheduling=async_scheduling, plugin=plugin)
        config.scheduler_config.max_num_inflight_kv_loads = 3
        config.scheduler_config.long_prefill_token_threshold = 256
        return config

    monkeypatch.setattr(build_mod, "vllm_config", with_loads)
    log2 = tmp_path / "engine2.jsonl"
    d = driver(tmp_path, static_params(5.0), blocks=40, env={"TTLCTL_LOG": str(log2)})
    f = _lines(log2)[0]
    assert f["kv_connector"] == "ExampleConnector" and f["max_num_inflight_kv_loads"] == 3
    assert f["long_prefill_token_threshold"] == 256
    warned = [w for w in d.sched.ttl_warnings if "inflight-kv-loads" in w]
    assert len(warned) == 1 and "--max-num-inflight-kv-loads 3" in warned[0]
    assert "outside the program queue" in warned[0]
    # the same cap without a connector loads nothing asynchronously: no warning
    monkeypatch.setattr(build_mod, "vllm_config", made)
    d = driver(tmp_path, static_params(5.0), blocks=40)
    assert d.sched.connector is None
    d.sched.scheduler_config.max_num_inflight_kv_loads = 3
    d.sched._ttl_install_queue()
    assert not [w for w in d.sched.ttl_warnings if "inflight-kv-loads" in w]


@pytest.mark.parametrize("value", ["abc", "-1", "nan"])
def test_a_bad_bundle_check_interval_warns_once_and_the_engine_serves(
    tmp_path: Path, value: str
) -> None:
    """As TTLCTL_MAX_PROGRAMS below: the scheduler starts, with its bundle, the default 2 s."""
    d = driver(tmp_path, static_params(5.0), blocks=8, env={"TTLCTL_BUNDLE_CHECK_S": value})
    assert d.sched.ttl.policy is not None and d.sched.ttl_watcher.every_s == 2.0
    warned = [w for w in d.sched.ttl_warnings if "TTLCTL_BUNDLE_CHECK_S" in w]
    assert len(warned) == 1 and repr(value) in warned[0], d.sched.ttl_warnings


@pytest.mark.parametrize(("value", "cap"), [("abc", DEFAULT_CAP), ("0", DEFAULT_CAP), ("7", 7)])
def test_a_bad_max_programs_warns_once_naming_the_value(
    tmp_path: Path, value: str, cap: int
) -> None:
    d = driver(tmp_path, static_params(5.0), blocks=8, env={"TTLCTL_MAX_PROGRAMS": value})
    assert d.sched.ttl.book.cap == cap
    warned = [w for w in d.sched.ttl_warnings if "TTLCTL_MAX_PROGRAMS" in w]
    assert len(warned) == (cap != 7)
    if warned:
        assert repr(value) in warned[0] and f"{DEFAULT_CAP:,}" in warned[0]


def test_vllms_cache_aware_admission_window_is_named_as_moot_under_a_policy(
    tmp_path: Path,
) -> None:
    """vLLM 0.34's ``--cache-aware-admission-window`` reorders the waiting queue by
    removing and prepending requests; the program queue puts them back in the policy's
    order, so the plugin says the window only costs lookups. ``cache_aware_window`` is the
    window as 0.34's scheduler applies it (0 where it does not: FCFS and prefix caching
    only); earlier versions lack it, which counts as 0."""
    d = driver(tmp_path, static_params(5.0), blocks=8)
    assert not [w for w in d.sched.ttl_warnings if "admission-window" in w]
    d.sched.cache_aware_window = 4
    d.sched._ttl_install_queue()
    warned = [w for w in d.sched.ttl_warnings if "admission-window" in w]
    assert len(warned) == 1 and "--cache-aware-admission-window 4 has no effect" in warned[0]


def test_vllms_reordering_of_the_window_leaves_the_program_queue_and_its_pins(
    tmp_path: Path,
) -> None:
    """vLLM 0.34's reordering itself (``Scheduler._reorder_waiting_by_cached_prefix``) on the
    plugin's queue: a call whose prefix is cached stays behind an earlier program's, and the
    pin it finds stays (run by ``make vllm-check``; earlier vLLMs have no such reordering)."""
    d = driver(tmp_path, static_params(5.0), blocks=64, async_scheduling=False)
    reorder = getattr(d.sched, "_reorder_waiting_by_cached_prefix", None)
    if reorder is None:
        pytest.skip("this vLLM has no cache-aware admission (0.34 on)")
    prompt = list(range(1, 65))
    d.add_ids("x0", "x", prompt, 2, last=False)
    for _ in range(4):
        d.update(d.schedule())
    pins = dict(d.sched.ttl.pins.pins)
    assert list(pins) == ["x"]
    d.add_ids("y0", "y", list(range(500, 548)), 2)
    d.add_ids("x1", "x", prompt + list(range(700, 716)), 2)
    d.add_ids("z0", "z", prompt + list(range(800, 816)), 2)
    cached = {
        r.request_id: d.sched.kv_cache_manager.get_num_cached_tokens(r) for r in d.sched.waiting
    }
    assert cached == {"x1": 64, "y0": 0, "z0": 64}
    before = [r.request_id for r in d.sched.waiting]
    assert before == ["x1", "y0", "z0"]  # the pinned program's call first, then by arrival
    d.sched.cache_aware_window, d.sched.cache_aware_threshold = 4, 0.0
    reorder()
    assert [r.request_id for r in d.sched.waiting] == before
    assert dict(d.sched.ttl.pins.pins) == pins


def _logged_sync(tmp_path: Path) -> tuple[Driver, Path]:
    """A synchronous scheduler with the plugin (5 s pins, 40 blocks) logging to a file."""
    log = tmp_path / "engine.jsonl"
    d = driver(
        tmp_path, static_params(5.0), blocks=40, async_scheduling=False,
        env={"TTLCTL_LOG": str(log)},
    )  # fmt: skip
    return d, log


def test_a_call_whose_first_token_is_its_last_logs_its_first_token(tmp_path: Path) -> None:
    """A one-token answer: its first token and its finish come in the same step (vLLM frees
    the request inside ``update_from_output``), and the log line still has a first token."""
    d, log = _logged_sync(tmp_path)
    d.add("A", "a", 40, 1)
    d.update(d.schedule())
    call = _lines(log)[-1]
    assert call["request_id"] == "A" and call["output_tokens"] == 1
    assert call["first_token_unix_s"] is not None
    assert call["arrival_unix_s"] <= call["first_token_unix_s"] <= call["finish_unix_s"]


def test_a_prefix_cache_reset_releases_every_pin_first(tmp_path: Path) -> None:
    """docs/deploy.md: the plugin releases every pin before a prefix-cache reset (vLLM's
    reset needs every block free, and refuses otherwise); the pins count as dropped."""
    d = driver(tmp_path, static_params(5.0), blocks=40, async_scheduling=False)
    d.add("A", "a", 40, 2)
    for _ in range(3):
        d.update(d.schedule())
    assert list(d.sched.ttl.pins.pins) == ["a"]
    assert d.sched.reset_prefix_cache() is True
    stats = d.sched.ttl_stats()
    assert not d.sched.ttl.pins.pins and stats["dropped"] == 1 and stats["pinned_blocks"] == 0


def test_vllms_priority_policy_orders_the_program_queue_as_vllm_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/deploy.md: ``--scheduling-policy priority`` is honoured. With no pin to tell
    the calls apart, the program queue puts a later call of a smaller priority before an
    earlier one of a larger priority, as vLLM's own priority queue (``Request.__lt__``) does,
    and the step admits them in that order."""
    made = build_mod.vllm_config

    def with_priority(engine: Any, *, async_scheduling: bool, plugin: bool) -> Any:
        config = made(engine, async_scheduling=async_scheduling, plugin=plugin)
        config.scheduler_config.policy = "priority"
        return config

    monkeypatch.setattr(build_mod, "vllm_config", with_priority)
    d = driver(tmp_path, static_params(5.0), blocks=40, async_scheduling=False)
    assert d.sched.policy == SchedulingPolicy.PRIORITY and d.sched.ttl.policy is not None
    requests: list[Request] = []
    for rid, program, priority in [("x0", "x", 1), ("y0", "y", 0), ("z0", "z", 1)]:
        d.now += 1.0
        d.calls[rid] = _Outputs([20_000, 20_001])
        params = SamplingParams(
            max_tokens=2, ignore_eos=True, extra_args={"program_id": program, "tool": "bash"}
        )
        ids = list(range(d._next_id, d._next_id + 32))
        d._next_id += 32
        request = Request(
            rid,
            ids,
            params,
            None,
            arrival_time=d.now,
            priority=priority,
            block_hasher=d.built.hasher,
        )
        requests.append(request)
        d.sched.add_request(request)
    vllms = [r.request_id for r in sorted(requests)]  # vLLM's priority queue's order
    assert vllms == ["y0", "x0", "z0"]
    assert [r.request_id for r in d.sched.waiting] == vllms
    out, _ = d.schedule()
    assert [r.req_id for r in out.scheduled_new_reqs] == vllms


def test_the_pin_cap_is_a_share_of_the_blocks_that_hold_kv_not_of_the_null_block(
    tmp_path: Path,
) -> None:
    """The pins may hold ``pin_cap`` of vLLM's usable blocks, ``num_gpu_blocks − 1`` (block
    0 is vLLM's null block and never holds KV): with 30 usable blocks and a cap of 0.75 a
    pin may hold 22.5 blocks, so a call of 22 blocks is pinned and one of 23 refused (counting
    the null block, 0.75 × 31 = 23.25, would pin it)."""
    d = driver(tmp_path, static_params(5.0, pin_cap=0.75), blocks=30, async_scheduling=False)
    pool = d.sched.kv_cache_manager.block_pool
    assert pool.num_gpu_blocks == d.built.num_gpu_blocks == 31
    assert d.sched.ttl.capacity_blocks == pool.num_gpu_blocks - 1 == 30
    d.add("A", "a", 360, 2)  # 23 blocks at its finish
    for _ in range(4):
        d.update(d.schedule())
    stats = d.sched.ttl_stats()
    assert stats["refused"] == 1 and stats["made"] == 0 and not d.sched.ttl.pins.pins
    d.add("B", "b", 345, 2)  # 22 blocks
    for _ in range(4):
        d.update(d.schedule())
    stats = d.sched.ttl_stats()
    assert (
        stats["made"] == 1 and stats["pinned_blocks"] == 22 and list(d.sched.ttl.pins.pins) == ["b"]
    )


def test_prefix_caching_off_is_warned_once_and_no_pin_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/troubleshooting.md ("Prefix caching is off"): the engine logs ``ttlctl: prefix
    caching is off, so pins cannot help: none are made`` once, and a finished call is not
    pinned."""
    made = build_mod.vllm_config

    def without_caching(engine: Any, *, async_scheduling: bool, plugin: bool) -> Any:
        config = made(engine, async_scheduling=async_scheduling, plugin=plugin)
        config.cache_config.enable_prefix_caching = False
        return config

    monkeypatch.setattr(build_mod, "vllm_config", without_caching)
    said = "ttlctl: prefix caching is off, so pins cannot help: none are made"
    logged: list[str] = []
    handler = logging.Handler(logging.WARNING)  # the plugin's warnings (the driver quiets vLLM)
    handler.emit = lambda record: logged.append(record.getMessage())  # type: ignore[method-assign]
    engine_logger = logging.getLogger("vllm.ttlctl.engine")
    level = engine_logger.level
    engine_logger.addHandler(handler)
    engine_logger.setLevel(logging.WARNING)
    try:
        d = driver(tmp_path, static_params(5.0), blocks=40, async_scheduling=False)
    finally:
        engine_logger.removeHandler(handler)
        engine_logger.setLevel(level)
    assert d.sched.cache_config.enable_prefix_caching is False
    assert d.sched.ttl.policy is not None and d.sched.ttl.policy.params.pins
    assert [w for w in d.sched.ttl_warnings if "prefix caching" in w] == [said]
    assert logged.count(said) == 1
    d.add("A", "a", 40, 2)
    for _ in range(3):
        d.update(d.schedule())
    assert d.sched.ttl_stats()["made"] == 0 and not d.sched.ttl.pins.pins


class DelayedFreeConnector(ExampleConnector):
    """vLLM's ExampleConnector, but it takes on freeing every finished request's blocks
    (``request_finished`` returns True: still sending; the blocks go when the worker reports
    the request in ``finished_sending``), as a producer connector does."""

    def request_finished(self, request: Any, block_ids: list[int]) -> tuple[bool, Any]:
        return True, None


def test_a_free_the_kv_connector_delays_is_not_pinned_but_counted_and_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other deferred free (ttlctl/engine/scheduler.py ``_free_request``): the KV
    connector's ``request_finished`` keeps the blocks, so vLLM does not free them at the
    finish: no pin, counted ``deferred`` and noted on the call's log line; when the connector
    is done vLLM frees them itself, still unpinned."""
    made = build_mod.vllm_config

    def with_connector(engine: Any, *, async_scheduling: bool, plugin: bool) -> Any:
        config = made(engine, async_scheduling=async_scheduling, plugin=plugin)
        config.kv_transfer_config = KVTransferConfig(
            kv_connector=DelayedFreeConnector.__name__,
            kv_connector_module_path=__name__,
            kv_role="kv_both",
            kv_connector_extra_config={"shared_storage_path": str(tmp_path / "kv")},
        )
        config.scheduler_config.disable_hybrid_kv_cache_manager = True  # the connector's need
        return config

    monkeypatch.setattr(build_mod, "vllm_config", with_connector)
    d, log = _logged_sync(tmp_path)
    assert isinstance(d.sched.connector, DelayedFreeConnector) and not d.sched.defer_block_free
    pool = d.sched.kv_cache_manager.block_pool
    free = pool.get_num_free_blocks()
    d.add("A", "a", 40, 2)
    for _ in range(2):
        d.update(d.schedule())
    stats = d.sched.ttl_stats()
    assert stats["deferred"] == 1 and stats["made"] == 0 and not d.sched.ttl.pins.pins
    assert "A" in d.sched.requests and pool.get_num_free_blocks() == free - 3  # still held
    call = _lines(log)[-1]
    assert call["request_id"] == "A" and call["output_tokens"] == 2
    assert call["pin_skipped"] == "deferred" and call["ttl_s"] == 0.0
    # the connector is done: vLLM frees the blocks, and the plugin does not pin them now
    out, step = d.schedule()
    step.output.kv_connector_output = KVConnectorOutput(finished_sending={"A"})
    d.update((out, step))
    assert "A" not in d.sched.requests and pool.get_num_free_blocks() == free
    assert d.sched.ttl_stats()["made"] == 0 and not d.sched.ttl.pins.pins
