"""The fleet door without vLLM: the router's command, the arrivals, and a fleet of stub
processes started and stopped as one (ttlctl/server/router.py, arrivals.py, fleet.py)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from profiles.shipped import resolve
from replay.validation.fleet import validate_fleet
from replay.validation.fleet_placement import check_placement
from replay.validation.servers import Sources
from replay.workload import load
from tests.child_signals import terminal_defaults
from tests.live.traces import agent_trace
from ttlctl import bundle as bundle_file
from ttlctl.cli import app
from ttlctl.errors import TtlctlError
from ttlctl.server import arrivals, router
from ttlctl.server.client import ServerError
from ttlctl.server.fleet import ROUTER_TRIES, OwnedFleet
from ttlctl.server.owned import OwnedServer, ServerStartError
from ttlctl.server.process import free_port, group_alive

#: a process that answers /health with 200 (a replica or a router, to the fleet)
STUB = textwrap.dedent(
    """
    import sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a): pass
        def do_GET(self):
            self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
    """
)


def _stub(
    tmp_path: Path, name: str, *, fails: bool = False, exits: str = "", port: int | None = None
) -> OwnedServer:
    """A stub that answers /health; ``fails``: one that exits 3 at once; ``exits``: Python
    run instead (a process that says something and exits); ``port``: given, not free."""
    port = free_port() if port is None else port
    script = tmp_path / "stub.py"
    script.write_text(STUB)
    if exits:
        cmd = [sys.executable, "-c", exits]
    elif fails:
        cmd = [sys.executable, "-c", "import sys; sys.exit(3)"]
    else:
        cmd = [sys.executable, str(script), str(port)]
    return OwnedServer(
        cmd,
        {"PATH": "/usr/bin:/bin"},
        tmp_path / f"{name}.log",
        f"http://127.0.0.1:{port}",
        startup_timeout_s=20.0,
        stop_grace_s=5.0,
        name=name,
    )


def test_the_router_command_takes_the_routers_own_flags() -> None:
    cmd = router.router_command(
        ["http://a:1", "http://b:2"],
        port=9000,
        policy="consistent_hash",
        program_scheduling_json='{"x":1}',
        command="vllm-router",
    )
    assert cmd == [
        "vllm-router", "--host", "127.0.0.1", "--port", "9000", "--policy", "consistent_hash",
        "--worker-urls", "http://a:1", "http://b:2",
        "--enable-program-scheduling", "--program-scheduling-config-json", '{"x":1}',
    ]  # fmt: skip
    # its metrics on a port of its own (the default, 29000, is the host's first router's)
    metrics = router.router_command([], port=1, command="x", prometheus_port=2)
    assert metrics[-4:] == ["--prometheus-host", "127.0.0.1", "--prometheus-port", "2"]
    mine = router.router_command(
        [], port=1, command="x", prometheus_port=2, extra=["--prometheus-port", "3"]
    )
    assert mine.count("--prometheus-port") == 1 and mine[-2:] == ["--prometheus-port", "3"]
    with pytest.raises(router.RouterError, match="--router takes cache_aware"):
        router.router_command([], port=1, policy="least_load", command="x")
    with pytest.raises(router.RouterError, match="--policy is set by ttlctl"):
        router.router_command([], port=1, extra=["--policy=random"], command="x")


def test_the_routers_calibration_warning_is_found_through_its_colours() -> None:
    line = '\x1b[33m WARN\x1b[0m \x1b[3mevent\x1b[0m="program_scheduling_reference_calibration"'
    assert router.reference_calibration_warned(line)
    assert not router.reference_calibration_warned("\x1b[32m INFO\x1b[0m Router ready")


def test_returned_share_counts_calls_that_went_back_to_the_previous_replica(
    tmp_path: Path,
) -> None:
    r1, r2 = tmp_path / "r1.jsonl", tmp_path / "r2.jsonl"
    lines = {
        r1: [(1.0, "a"), (3.0, "a"), (2.0, "b"), (9.0, None)],
        r2: [(4.0, "a"), (5.0, "b"), (6.0, "c")],
    }
    for path, rows in lines.items():
        path.write_text("".join(json.dumps({"t": t, "session": s}) + "\n" for t, s in rows))
    order = arrivals.read({"r1": r1, "r2": r2, "r3": tmp_path / "none.jsonl"})
    assert order == {"a": ["r1", "r1", "r2"], "b": ["r1", "r2"], "c": ["r2"]}
    # a: r1→r1 returned, r1→r2 not; b: r1→r2 not; c: no second call
    assert arrivals.returned_share(order) == pytest.approx(1 / 3)
    assert arrivals.per_replica(order) == {"r1": 3, "r2": 3}
    assert arrivals.returned_share({"c": ["r1"]}) is None


def test_a_fleet_starts_together_and_stops_every_process(tmp_path: Path) -> None:
    replicas = [_stub(tmp_path, f"replica r{i}") for i in (1, 2)]
    front = _stub(tmp_path, "vllm-router")
    with OwnedFleet(replicas, front) as fleet:
        pids = [s.pid for s in (*replicas, front)]
        assert fleet.url == front.url
        assert all(p is not None and group_alive(p) for p in pids)
    assert not any(group_alive(p) for p in pids if p is not None)


def test_a_router_that_fails_to_start_leaves_nothing_running(tmp_path: Path) -> None:
    replicas = [_stub(tmp_path, f"replica r{i}") for i in (1, 2)]
    fleet = OwnedFleet(replicas, _stub(tmp_path, "vllm-router", fails=True))
    pids: list[int] = []
    real_wait = replicas[1].wait_ready

    def wait_and_note() -> str:
        pids.extend(s.pid for s in replicas if s.pid is not None)
        return real_wait()

    replicas[1].wait_ready = wait_and_note  # type: ignore[method-assign]
    with pytest.raises(ServerStartError, match="vllm-router exited with code 3"):
        fleet.start()
    assert len(pids) == 2 and not any(group_alive(p) for p in pids)


def _taken(tmp_path: Path, name: str) -> OwnedServer:
    """A router that finds its port taken, as vllm-router says it."""
    said = "import sys; print('Error starting router: Address already in use (os error 98)'); "
    return _stub(tmp_path, name, exits=said + "sys.exit(1)")


def test_a_router_whose_port_was_taken_starts_again_on_fresh_ports(tmp_path: Path) -> None:
    replicas = [_stub(tmp_path, f"replica r{i}") for i in (1, 2)]
    made: list[OwnedServer] = []

    def fresh() -> OwnedServer:
        made.append(_taken(tmp_path, "vllm-router") if not made else _stub(tmp_path, "router2"))
        return made[-1]

    with OwnedFleet(replicas, _taken(tmp_path, "vllm-router"), fresh_router=fresh) as fleet:
        # taken twice, then started: the fleet's URL is the one that started
        assert fleet.port_retries == 2 and fleet.router is made[-1]
        assert fleet.url == made[-1].url and group_alive(made[-1].pid or -1)
    # a failure that is not a taken port is not retried, nor one past the tries
    fleet = OwnedFleet(
        [_stub(tmp_path, "replica r1")],
        _stub(tmp_path, "vllm-router", fails=True),
        fresh_router=fresh,
    )
    with pytest.raises(ServerStartError, match="exited with code 3"):
        fleet.start()
    assert fleet.port_retries == 0
    always = OwnedFleet(
        [_stub(tmp_path, "replica r1")],
        _taken(tmp_path, "vllm-router"),
        fresh_router=lambda: _taken(tmp_path, "vllm-router"),
    )
    with pytest.raises(ServerStartError, match="exited with code 1"):
        always.start()
    assert always.port_retries == ROUTER_TRIES - 1


def test_free_ports_are_never_handed_out_twice() -> None:
    """The ports a command gives its servers and router are told before any binds one;
    regression: the system offered a replica's port again for the router, which found
    that replica answering its health check, then failed to bind (a live run went to one
    replica, not through the router)."""
    ports = [free_port() for _ in range(500)]
    assert len(set(ports)) == len(ports)


def test_a_router_whose_port_a_replica_holds_is_not_taken_for_started(tmp_path: Path) -> None:
    replicas = [_stub(tmp_path, f"replica r{i}") for i in (1, 2)]
    held = replicas[1].port
    made: list[OwnedServer] = []

    def fresh() -> OwnedServer:
        made.append(_stub(tmp_path, "router2"))
        return made[-1]

    # before: the replica answered the router's health check and the fleet's URL was its
    with OwnedFleet(replicas, _stub(tmp_path, "vllm-router", port=held), fresh_router=fresh) as f:
        assert f.port_retries == 1 and f.router is made[0]
        assert f.url == made[0].url != replicas[1].url
    alone = OwnedFleet(replicas, _stub(tmp_path, "vllm-router", port=held))
    with pytest.raises(ServerStartError, match=f"vllm-router: port {held} is taken"):
        alone.start()
    assert not any(s.pid for s in replicas)  # nothing left running


def test_a_fleet_tells_when_its_router_has_exited(tmp_path: Path) -> None:
    replicas = [_stub(tmp_path, f"replica r{i}") for i in (1, 2)]
    with OwnedFleet(replicas, _stub(tmp_path, "vllm-router")) as fleet:
        fleet.check_running()  # all running: nothing to tell
        pid = fleet.router.pid
        assert pid is not None
        os.killpg(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while fleet.router.exited() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        with pytest.raises(ServerError, match=r"vllm-router exited with code -9 .*log: "):
            fleet.check_running()


def test_a_fleet_asked_after_a_failed_call_waits_for_a_dying_process(tmp_path: Path) -> None:
    """A call that failed because the router is dying can be seen before the router can be
    reaped: asked with ``wait_s``, the fleet looks again until then."""
    replicas = [_stub(tmp_path, f"replica r{i}") for i in (1, 2)]
    with OwnedFleet(replicas, _stub(tmp_path, "vllm-router")) as fleet:
        start = time.monotonic()
        fleet.check_running(wait_s=0.3)  # all running: told so once the wait is over
        assert time.monotonic() - start >= 0.3
        pid = fleet.router.pid
        assert pid is not None
        threading.Timer(0.2, os.killpg, (pid, signal.SIGKILL)).start()
        with pytest.raises(ServerError, match=r"vllm-router exited with code -9"):
            fleet.check_running(wait_s=10.0)  # dies during the wait
        assert time.monotonic() - start < 10.0


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_whole_fleet(tmp_path: Path, signum: int) -> None:
    """A fleet owner stopped by SIGTERM or Ctrl-C stops its replicas and router on the
    way out."""
    script = tmp_path / "owner.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import json, sys, time
            sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
            from pathlib import Path
            from tests.server.test_fleet import _stub
            from ttlctl.server.fleet import ROUTER_TRIES, OwnedFleet
            tmp = Path({str(tmp_path)!r})
            servers = [_stub(tmp, n) for n in ("r1", "r2", "router")]
            with OwnedFleet(servers[:2], servers[2]):
                print(json.dumps([s.pid for s in servers]), flush=True)
                time.sleep(60)
            """
        )
    )
    owner = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=terminal_defaults,
    )
    assert owner.stdout is not None
    pids = json.loads(owner.stdout.readline())
    assert all(group_alive(p) for p in pids)
    owner.send_signal(signum)
    code = owner.wait(timeout=30)
    # SIGTERM: the shell's status for it; Ctrl-C: Python's KeyboardInterrupt exit
    assert code == (128 + signal.SIGTERM if signum == signal.SIGTERM else -signal.SIGINT)
    deadline = time.monotonic() + 10
    while any(group_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(group_alive(p) for p in pids)


def test_validate_without_the_router_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.live.traces import agent_trace

    monkeypatch.setattr(router, "COMMAND", "vllm-router-not-installed")
    trace = agent_trace(tmp_path / "t.parquet", programs=2, calls=2)
    res = CliRunner().invoke(
        app,
        ["validate", str(trace), "--replicas", "2", "--router", "round_robin",
         "--model", str(tmp_path), "--work-dir", str(tmp_path / "w")],
    )  # fmt: skip
    assert res.exit_code == 2, res.output
    assert "vllm-router-not-installed is not installed" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert not list((tmp_path / "w").glob("*.log"))  # nothing was started
    res = CliRunner().invoke(
        app, ["validate", str(trace), "--router", "round_robin", "--model", str(tmp_path)]
    )
    assert res.exit_code == 2 and "--router needs --replicas" in res.stderr
    res = CliRunner().invoke(
        app, ["validate", str(trace), "--replicas", "0", "--model", str(tmp_path)]
    )
    assert res.exit_code == 2 and "--replicas must be at least 1, not 0" in res.stderr
    # far too many: refused before a server starts (it made a work folder per replica)
    huge = ["validate", str(trace), "--replicas", "99999999999999999999", "--model", str(tmp_path)]
    res = CliRunner().invoke(app, [*huge, "--work-dir", str(tmp_path / "huge")])
    assert res.exit_code == 2 and "--replicas must be at most 100,000" in res.stderr
    assert not (tmp_path / "huge").exists() or not any((tmp_path / "huge").iterdir())
    res = CliRunner().invoke(
        app,
        ["validate", str(trace), "--replicas", "2", "--router", "round_robin", "--repeats", "0",
         "--model", str(tmp_path)],
    )  # fmt: skip
    assert res.exit_code == 2 and "--repeats must be at least 1" in res.stderr
    res = CliRunner().invoke(
        app,
        ["validate", str(trace), "--replicas", "2", "--router", "round_robin", "--backend",
         "vllm", "--model", str(tmp_path)],
    )  # fmt: skip
    assert res.exit_code == 2 and "--backend does not apply" in res.stderr
    res = CliRunner().invoke(
        app,
        ["validate", str(trace), "--replicas", "2", "--router", "least_load",
         "--model", str(tmp_path)],
    )  # fmt: skip
    assert res.exit_code == 2 and "--router takes cache_aware" in res.stderr
    # the refusal names every router validate takes, Program scheduling and the bundle's
    # too, and the router's spelling of replay's (round-robin)
    assert "kv_aware, program_scheduling, bundle; not 'least_load'" in res.stderr
    res = CliRunner().invoke(
        app,
        ["validate", str(trace), "--replicas", "2", "--router", "round-robin",
         "--model", str(tmp_path)],
    )  # fmt: skip
    assert res.exit_code == 2, res.output
    assert "not 'round-robin' (vllm-router's spelling: round_robin)" in res.stderr


def test_program_scheduling_is_consistent_hash_with_the_profiles_calibration() -> None:
    from profiles import shipped
    from profiles.router_calibration import calibrate
    from replay.validation.fleet_routers import router_setup

    assert router_setup("round_robin", None, None) == ("round_robin", None, ())
    # another router takes the Program scheduling config given as it is
    given = '{"program_scheduling_enable_key": "always"}'
    assert router_setup("cache_aware", None, given) == ("cache_aware", given, ())
    policy, value, flags = router_setup("program_scheduling", None, None)
    assert policy == "consistent_hash" and value is not None and flags == ()
    assert json.loads(value) == {"program_scheduling_enable_key": "auto"}
    cal = calibrate(shipped.resolve("tiny-cpu")[0])
    _, value, _ = router_setup("program_scheduling", cal, None)
    assert value is not None
    doc = json.loads(value)
    assert doc["program_scheduling_enable_key"] == "auto"
    assert doc["decode_throughput_model"] == cal.to_json()["decode_throughput_model"]


@pytest.mark.parametrize(
    ("cpus_per_replica", "gpus_per_replica", "message"),
    [
        (None, 0, "--gpus-per-replica must be at least 1, not 0"),
        (0, None, "--cpus-per-replica must be at least 1, not 0"),
    ],
)
def test_a_fleets_placement_is_checked_before_its_gpus_are_looked_for(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    cpus_per_replica: int | None,
    gpus_per_replica: int | None,
    message: str,
) -> None:
    """On a machine with no GPU (no CUDA_VISIBLE_DEVICES, no nvidia-smi) a bad value is
    named as such, not as "no GPU found". Nothing is made."""
    work = load(agent_trace(tmp_path / "t.parquet", programs=2, calls=2))
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(temp))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PATH", str(temp))  # no nvidia-smi, no vllm-router
    with pytest.raises(TtlctlError) as refused:
        validate_fleet(
            work,
            Sources(base_cmd=["vllm", "serve", "m"]),
            replicas=2,
            routers=["round_robin"],
            cpus_per_replica=cpus_per_replica,
            gpus_per_replica=gpus_per_replica,
        )
    assert str(refused.value) == message
    assert list(temp.iterdir()) == []


def test_a_fleet_refused_for_its_arguments_leaves_no_work_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bad input is refused before anything is made: no ttlctl-validate-fleet-* folder."""
    work = load(agent_trace(tmp_path / "t.parquet", programs=2, calls=2))
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(temp))
    damaged = tmp_path / "bundle.json"
    damaged.write_text("{")
    cases = (
        (["continuum"], None, ["consistent_hash"]),
        (["vllm"], damaged, ["consistent_hash"]),
        # a router it does not know, even after one it does: refused before the first fleet
        (["vllm"], None, ["round_robin", "least_load"]),
    )
    for policies, bundle, routers in cases:
        with pytest.raises(TtlctlError, match=r"needs --bundle|not valid JSON|--router takes"):
            validate_fleet(
                work,
                Sources(base_cmd=["vllm", "serve", "m"]),
                replicas=2,
                routers=routers,
                policies=policies,
                bundle=bundle,
            )
    assert list(temp.iterdir()) == []


def test_continuum_in_a_fleet_without_a_bundle_starts_cold(tmp_path: Path) -> None:
    """As on one server: with --profile, continuum's replicas get a cold-start bundle (no
    fit) written in the work folder before any replica starts (here a replica that exits at
    once: the error is its own). Regression (a walker's find): the fleet refused, though the
    docs said continuum gets a cold-start bundle without --bundle."""
    router.binary()  # the fleet checks its router first (tests/router_bin.py)
    work = load(agent_trace(tmp_path / "t.parquet", programs=2, calls=2))
    profile = resolve("llama-3.1-8b-h100")[0]
    fails = Sources(base_cmd=[sys.executable, "-c", "import sys; sys.exit(3)"])
    with pytest.raises(ServerError, match="exited with code 3"):
        validate_fleet(
            work,
            fails,
            replicas=2,
            routers=["consistent_hash"],
            policies=["continuum"],
            profile=profile,
            work_dir=tmp_path / "w",
        )
    cold = bundle_file.read(tmp_path / "w" / "cold-start-bundle.json")
    assert cold["fit"]["tools"] == {} and cold["profile"] == profile.to_json()


def test_cpus_and_gpus_per_replica_go_together() -> None:
    """GPU replicas whose host threads are pinned to CPUs of their own: both are taken
    (they were once refused together, which refused tests/live/test_fleet.py's fleet)."""
    check_placement(1, 1)
    check_placement(2, None)
    check_placement(None, 2)
    with pytest.raises(TtlctlError, match=r"^--cpus-per-replica must be at least 1, not 0$"):
        check_placement(0, 1)


def test_the_worker_order_is_the_last_ready_lines() -> None:
    """A log that holds two starts (the same file written again) gives the last order."""
    log = (
        'Router ready | workers: ["http://127.0.0.1:1", "http://127.0.0.1:2"]\n'
        "INFO shutting down\n"
        'Router ready | workers: ["http://127.0.0.1:2", "http://127.0.0.1:1"]\n'
    )
    assert router.worker_order(log) == ["http://127.0.0.1:2", "http://127.0.0.1:1"]


def test_the_arrivals_middleware_records_posted_calls_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run as vLLM's server runs it, on Starlette's requests: a call POSTed to a completion
    path is one line (its session, its path); a GET there, or a POST elsewhere (the
    router's /tokenize), is served and not recorded."""
    requests = pytest.importorskip("starlette.requests")
    path = tmp_path / "arrivals.jsonl"
    monkeypatch.setenv(arrivals.ENV, str(path))

    async def served(request: object) -> str:
        return "served"

    for method, where in (
        ("GET", "/v1/completions"),
        ("POST", "/tokenize"),
        ("POST", "/v1/chat/completions"),
    ):
        scope = {"type": "http", "method": method, "path": where, "query_string": b"",
                 "headers": [(b"x-session-id", b"job-42")]}  # fmt: skip
        assert asyncio.run(arrivals.record(requests.Request(scope), served)) == "served"
    (line,) = path.read_text().splitlines()
    doc = json.loads(line)
    assert (doc["session"], doc["path"]) == ("job-42", "/v1/chat/completions")
    assert abs(doc["t"] - time.time()) < 60


def test_a_router_made_once_the_replicas_are_up_is_retried_as_a_given_one(
    tmp_path: Path,
) -> None:
    """A fleet made without its router (one whose flags need what the replicas say) makes
    it when they answer: then, not before; a taken port retried on a fresh one as a given
    router's is; a replica that exited meanwhile is said, and the router never made."""
    replicas = [_stub(tmp_path, f"replica r{i}") for i in (1, 2)]
    made: list[OwnedServer] = []

    def fresh() -> OwnedServer:
        assert all(r.pid is not None for r in replicas)  # made once they run
        made.append(_taken(tmp_path, "vllm-router") if not made else _stub(tmp_path, "router2"))
        return made[-1]

    fleet = OwnedFleet(replicas, None, fresh_router=fresh)
    with pytest.raises(RuntimeError, match="made once its replicas are up"):
        fleet.url  # noqa: B018
    with fleet:
        assert len(made) == 2 and fleet.port_retries == 1 and fleet.router is made[1]
    assert not any(group_alive(s.pid or -1) for s in (*replicas, *made))
    dying = [_stub(tmp_path, "replica r1", exits="import time; time.sleep(1.5)")]
    asked: list[OwnedServer] = []  # the factory would ask the dead replica what it is
    late = OwnedFleet(
        dying, None, fresh_router=lambda: asked.append(_stub(tmp_path, "x")) or asked[0]
    )
    late.replicas[0].wait_ready = lambda: time.sleep(3.0)  # type: ignore[method-assign]
    with pytest.raises(ServerError, match="replica r1"):
        late.start()
    assert asked == []
    with pytest.raises(ValueError, match="its router, or a way to make one"):
        OwnedFleet(replicas, None)
