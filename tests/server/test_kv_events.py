"""KV events from a fleet's replicas to vllm-router's kv_aware (ttlctl.server.kv_events):
each replica publishes on a loopback port of its own, as vLLM's own code binds it, and the
router, made once the replicas answer, subscribes to each with their block size and model.

The events reaching the real router from real vLLM replicas: tests/live/test_kv_events.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from replay.validation.servers import Fleet, Sources, policy_fleet
from tests.live.servers import STUB, running_with
from tests.router_bin import router_or_skip
from ttlctl.server import kv_events, router
from ttlctl.server.client import ServerError
from ttlctl.server.process import free_port


def test_vllm_binds_the_publisher_on_loopback_only() -> None:
    """vLLM takes the config, binds (not connects to) its endpoint, and ZeroMQ listens on
    127.0.0.1 there, where the router's tcp://127.0.0.1:PORT reaches it."""
    zmq = pytest.importorskip("zmq", reason="pyzmq comes with vLLM (the engine extra)")
    config_mod = pytest.importorskip("vllm.config", reason="needs vLLM (the engine extra)")
    events_mod = pytest.importorskip("vllm.distributed.kv_events")
    KVEventsConfig, ZmqEventPublisher = config_mod.KVEventsConfig, events_mod.ZmqEventPublisher

    port = free_port()
    flag, value = kv_events.engine_args(port)
    assert flag == "--kv-events-config"
    config = KVEventsConfig(**json.loads(value))
    assert config.enable_kv_cache_events and config.publisher == "zmq"
    assert ZmqEventPublisher._is_bind_endpoint(config.endpoint)
    ctx = zmq.Context()
    pub, sub = ctx.socket(zmq.PUB), ctx.socket(zmq.SUB)
    try:
        pub.bind(config.endpoint)
        assert pub.getsockopt_string(zmq.LAST_ENDPOINT) == f"tcp://127.0.0.1:{port}"
        sub.connect(f"tcp://127.0.0.1:{port}")
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        for _ in range(50):  # a subscriber joins a moment after it connects
            pub.send(b"event")
            if sub.poll(100):
                break
        assert sub.recv() == b"event"
    finally:
        pub.close(linger=0)
        sub.close(linger=0)
        ctx.term()


def test_the_routers_flags_name_each_replica_and_are_ttlctls_own() -> None:
    args = kv_events.router_args({"http://h:1": 5001, "http://h:2": 5002}, 32, "tiny")
    assert args == [
        "--kv-event-source", "http://h:1=tcp://127.0.0.1:5001",
        "--kv-event-source", "http://h:2=tcp://127.0.0.1:5002",
        "--kv-event-block-size", "32", "--kv-event-model", "tiny",
    ]  # fmt: skip
    with pytest.raises(ValueError, match="positive"):
        kv_events.router_args({"http://h:1": 5001}, 0, "tiny")
    sources = kv_events.router_args({"http://h:1": 5001}, 16, "m")
    cmd = router.router_command(["http://h:1"], port=1, command="vr", kv_event_sources=sources)
    assert cmd[-len(sources) :] == sources
    for flag in kv_events.ROUTER_FLAGS:
        with pytest.raises(router.RouterError, match=f"^{flag} is set by ttlctl"):
            router.router_command(
                ["http://h:1"], port=1, command="vr", kv_event_sources=sources, extra=[flag, "x"]
            )
    # a router reading no events leaves them to the caller
    assert router.router_command(["u"], port=1, command="vr", extra=["--kv-event-model", "m"])


def _stub_fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: str) -> tuple[Fleet, Path]:
    pids, others = tmp_path / "pids", tmp_path / "others"
    pids.mkdir()
    monkeypatch.setenv("STUB_CACHE", cache)
    monkeypatch.setenv("STUB_PIDS", str(pids))
    monkeypatch.setenv("STUB_OTHERS", str(others))
    made = policy_fleet(
        Sources(base_cmd=[sys.executable, str(STUB)], startup_timeout_s=60.0),
        "vllm",
        None,
        tmp_path,
        "-kv_aware",
        replicas=2,
        router_policy="kv_aware",
    )
    return made, others


def test_a_kv_aware_fleet_wires_each_replica_to_the_router(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    router_or_skip()
    made, others = _stub_fleet(tmp_path, monkeypatch, 'block_size="32",num_gpu_blocks="64"')
    fleet = made.fleet
    ports = []
    for replica in fleet.replicas:
        flag = replica.command.index("--kv-events-config")
        endpoint = json.loads(replica.command[flag + 1])["endpoint"]
        assert endpoint.startswith("tcp://[::ffff:127.0.0.1]:")
        ports.append(int(endpoint.rsplit(":", 1)[1]))
    assert len(set(ports)) == 2
    with pytest.raises(RuntimeError, match="made once its replicas are up"):
        fleet.router  # noqa: B018 (its flags need the replicas' block size)
    with fleet:
        cmd = fleet.router.command
        urls = [r.url for r in fleet.replicas]
        assert cmd[cmd.index("--policy") + 1] == "kv_aware"
        sources = [cmd[i + 1] for i, a in enumerate(cmd) if a == "--kv-event-source"]
        assert sources == [f"{u}=tcp://127.0.0.1:{p}" for u, p in zip(urls, ports, strict=True)]
        assert cmd[cmd.index("--kv-event-block-size") + 1] == "32"
        assert cmd[cmd.index("--kv-event-model") + 1] == "stub"  # the model they serve
        fleet.check_running()  # the real router took them
        log = router.plain(fleet.router.log_path.read_text())
        for url in urls:
            assert f'using configured static KV event sources worker_url="{url}"' in log
    assert running_with(f"STUB_OTHERS={others}") == []


def test_a_replica_that_does_not_say_its_block_size_stops_the_fleet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    router_or_skip()
    made, others = _stub_fleet(tmp_path, monkeypatch, 'num_gpu_blocks="64"')
    with pytest.raises(ServerError, match=r"/metrics gives no KV block size .*kv_aware"):
        made.fleet.start()
    assert running_with(f"STUB_OTHERS={others}") == []
