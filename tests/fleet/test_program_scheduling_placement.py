"""The ``program-scheduling`` model places programs where the real ``vllm-router`` 0.1.17
does with ``--enable-program-scheduling``: the real binary in front of stub workers (three,
or two on loopback addresses chosen for their URLs' hashes; HTTP servers that answer a
completion at once, note the ``X-Session-ID`` of each call in arrival order and serve a
``/metrics`` text with a ``vllm:num_requests_waiting`` the test sets; no vLLM), calls sent
one after another, and the worker of each call, in the order the workers got them,
compared with the model's for the same worker URLs, the model driven as the fleet drives
it (``make_router``, ``route``, ``completed``, ``next_wake`` and ``tick``; on a clock of
its own, where the test's pauses are as long as the real ones).

What is checked is what placement shows without a race: each binding strategy the model
has (``program_round_robin``, ``least_program_count``, ``consistent_hash``) on the first
calls of many programs (``consistent_hash``'s ring over the URLs sorted, down to which
worker keeps a virtual node two workers' URLs hash alike: the later URL's, given the URLs
in any order); a program's later calls going home while bound; the release of
programs paused past ``paused_retention_ttl_seconds`` (their next call bound afresh);
which programs ``least_program_count`` counts (acting, or with a call in flight or
retained; not those paused between calls, as every program is while its worker's window
of tool-call intervals is not full and its acting TTL is 0); the admission gate on the
worker's polled waiting count (an acting program's call passes it, ``binding_only`` has
none), the count bound and the force-resume deadline that passes it, and the order
retained calls resume in (``resume_order``). Where the router's own timing enters (its
metrics ticks, the pause retention, a force-resume deadline), the test waits for what the
router reports (the stubs' scrapes, its retained-calls gauge) or leaves a margin of
seconds. The stubs' ports are drawn afresh every run. Skipped only where vllm-router
cannot run."""

from __future__ import annotations

import itertools
import json
import re
import threading
import time
import urllib.request
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from replay.fleet.routers import RouterSettings, make_router
from replay.fleet.routers.base import HOLD, RoutedCall
from replay.fleet.routers.consistent_hash import VIRTUAL_NODES_PER_WORKER, session_key
from replay.fleet.routers.furc import fbi_hash
from replay.fleet.routers.program_scheduling import ProgramScheduling
from tests.fleet.views import View, waiting
from tests.http_stub import json_reply, serving
from tests.router_bin import router_or_skip, send_session_call, started_router
from ttlctl.server import router
from ttlctl.server.process import free_port

#: the stub's prompt and what it reports of it (the router prices a miss from the usage)
PROMPT = [1, 2, 3]
#: seconds between the model's events: a call arrives this long after the last event
#: and ends this long after it arrives (the stubs answer at once)
STEP_S = 0.005
#: seconds a wait for the real router may take before the test gives up
PATIENCE_S = 15.0
#: the stubs' addresses unless a test chooses them: three on free local ports
THREE_STUBS = (("127.0.0.1", 0),) * 3


@dataclass
class _Stub:
    """One stub worker: the waiting count its ``/metrics`` reports and its scrapes so far."""

    url: str = ""
    waiting: int = 0
    scrapes: int = 0
    #: sessions whose call it answers only once their event is set (noted on arrival)
    hold: dict[str, threading.Event] = field(default_factory=dict)
    #: held while a scrape reads ``waiting`` and counts itself
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class _Live:
    """The real router in front of the stubs: its URL, its Prometheus URL, the stubs (in
    ``--worker-urls`` order) and every call as (session, worker URL), in arrival order."""

    url: str
    metrics_url: str
    stubs: list[_Stub]
    arrivals: list[tuple[str, str]]

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.stubs]


def _worker(
    stub: _Stub, arrivals: list[tuple[str, str]], lock: threading.Lock
) -> type[BaseHTTPRequestHandler]:
    class Worker(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return None

        def do_GET(self) -> None:
            if self.path.split("?")[0] != "/metrics":
                json_reply(self, {"object": "list", "data": [{"id": "m", "object": "model"}]})
                return
            with stub.lock:
                stub.scrapes += 1
                text = f'vllm:num_requests_waiting{{engine="0",model_name="m"}} {stub.waiting}\n'
            body = text.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            session = self.headers.get("x-session-id") or ""
            with lock:
                arrivals.append((session, stub.url))
            if session in stub.hold:
                stub.hold[session].wait(PATIENCE_S)
            usage = {"prompt_tokens": len(PROMPT), "completion_tokens": 1}
            json_reply(
                self,
                {
                    "id": "c",
                    "object": "text_completion",
                    "choices": [{"index": 0, "text": "x", "finish_reason": "length"}],
                    "usage": usage | {"total_tokens": len(PROMPT) + 1},
                },
            )

    return Worker


@contextmanager
def _fleet(
    tmp_path: Path,
    name: str,
    config: dict[str, Any],
    addresses: Sequence[tuple[str, int]] = THREE_STUBS,
) -> Iterator[_Live]:
    """The real router with Program scheduling (``config`` over the enable key the replay
    needs) in front of a stub at each of ``addresses`` (host, port; 0: a free one)."""
    command = router_or_skip()
    lock = threading.Lock()
    arrivals: list[tuple[str, str]] = []
    stubs = [_Stub() for _ in addresses]
    with ExitStack() as stack:
        for stub, (host, port) in zip(stubs, addresses, strict=True):
            stub.url = stack.enter_context(serving(_worker(stub, arrivals, lock), host, port))
        port, prometheus = free_port(), free_port()
        front = started_router(
            router.router_command(
                [s.url for s in stubs],
                port=port,
                policy="consistent_hash",
                program_scheduling_json=json.dumps(_config(config)),
                command=command,
                prometheus_port=prometheus,
            ),
            port,
            tmp_path / f"{name}-router.log",
            name,
        )
        stack.enter_context(front)
        yield _Live(front.url, f"http://127.0.0.1:{prometheus}/metrics", stubs, arrivals)


def _config(config: dict[str, Any]) -> dict[str, Any]:
    return {"program_scheduling_enable_key": "auto", **config}


def _send(url: str, session: str) -> None:
    send_session_call(url, session, PROMPT, PATIENCE_S)


def _wait_for(what: str, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + PATIENCE_S
    while not done():
        assert time.monotonic() < deadline, f"the router did not get there: {what}"
        time.sleep(0.02)


def _sessions(live: _Live) -> list[str]:
    """The sessions of the calls the stubs got so far, in arrival order."""
    return [session for session, _ in list(live.arrivals)]


def _queue_engines(live: _Live, counts: dict[str, int]) -> None:
    """Have the stubs of ``counts`` (by URL) report that many requests waiting, and wait
    until the router has applied a poll that read it: the next scrape reads it, and the
    one after begins once that poll is applied (the router polls its workers in turn)."""
    stubs = [s for s in live.stubs if s.url in counts]
    seen = []
    for stub in stubs:
        with stub.lock:
            stub.waiting = counts[stub.url]
            seen.append(stub.scrapes)
    _wait_for(
        "two polls of each",
        lambda: all(s.scrapes >= b + 2 for s, b in zip(stubs, seen, strict=True)),
    )


def _drain_engines(live: _Live) -> None:
    """The stubs report no request waiting (the router's next poll reads it)."""
    for stub in live.stubs:
        stub.waiting = 0


def _retained(live: _Live, session: str, url: str, queued: int) -> threading.Thread:
    """A call of ``session`` sent from a thread, once the router says it retains it for
    ``url`` (``queued`` calls retained there then)."""
    thread = threading.Thread(target=_send, args=(live.url, session), daemon=True)
    thread.start()
    _wait_for(f"{session} retained for {url}", lambda: _queued(live, url) == queued)
    return thread


def _queued(live: _Live, url: str) -> int:
    """The calls the router says it retains for worker ``url`` (its gauge, set at each
    metrics tick)."""
    with urllib.request.urlopen(live.metrics_url, timeout=PATIENCE_S) as response:
        text = response.read().decode()
    found = re.search(
        rf'^vllm_router_agent_aware_rank_queue_size\{{[^}}]*target="{re.escape(url)}"[^}}]*\}} '
        r"(\S+)$",
        text,
        re.MULTILINE,
    )
    return 0 if found is None else int(float(found.group(1)))


@dataclass
class _Model:
    """The model made as the fleet makes it, for the stubs' URLs, on a clock of its own."""

    router: ProgramScheduling
    urls: list[str]
    now: float = 0.0
    turns: Counter[str] = field(default_factory=Counter)
    #: each call served as (session, worker URL), in order
    placed: list[tuple[str, str]] = field(default_factory=list)
    _held: dict[str, RoutedCall] = field(default_factory=dict)
    _running: dict[str, tuple[RoutedCall, int]] = field(default_factory=dict)

    @classmethod
    def of(cls, config: dict[str, Any], urls: list[str]) -> _Model:
        settings = RouterSettings(
            "program-scheduling",
            program_scheduling_config_json=json.dumps(_config(config)),
            program_scheduling_calibration="reference",
        )
        made = make_router(settings, len(urls), seed=0, block_size=16, worker_urls=urls)
        assert isinstance(made, ProgramScheduling)
        return cls(made, urls)

    def call(
        self, session: str, engine_waiting: dict[str, int] | None = None, *, ends: bool = True
    ) -> None:
        """One call of ``session`` (the engines' waiting counts by URL, none unless given):
        served, ended at once unless not ``ends`` (then at :meth:`end`), or held until a
        :meth:`poll` admits it."""
        self.turns[session] += 1
        call = RoutedCall(session, self.turns[session] - 1, ((1, len(PROMPT)),), len(PROMPT))
        self.now += STEP_S
        replica = self.router.route(call, self._view(engine_waiting), self.now)
        if replica == HOLD:
            self._held[session] = call
        else:
            self._serve(call, replica, ends=ends)

    def end(self, session: str) -> None:
        call, replica = self._running.pop(session)
        self.now += STEP_S
        self.router.completed(replica, call, self.now)
        self._admitted()

    def wait(self, seconds: float) -> None:
        self.now += seconds

    def poll(self, engine_waiting: dict[str, int] | None = None) -> None:
        """The router's next look at its queues (a metrics tick, or a force-resume
        deadline), as the fleet wakes it, the engines' waiting counts ``engine_waiting``:
        the calls it admits are served (and end at once, which may admit more)."""
        wake = self.router.next_wake(self.now)
        assert wake is not None, "the model retains no call"
        self.now = wake
        self.router.tick(self.now, self._view(engine_waiting))
        self._admitted()

    def _admitted(self) -> None:
        for session, replica in self.router.released():
            self._serve(self._held.pop(session), replica, ends=True)

    def _serve(self, call: RoutedCall, replica: int, *, ends: bool) -> None:
        self.placed.append((call.session, self.urls[replica]))
        self._running[call.session] = (call, replica)
        if ends:
            self.end(call.session)

    def _view(self, engine_waiting: dict[str, int] | None) -> View:
        return waiting([(engine_waiting or {}).get(url, 0) for url in self.urls])


def _named(placed: list[tuple[str, str]], urls: list[str]) -> list[str]:
    """Each call as ``session@k``, k its worker's place among the URLs sorted (as the
    router orders the binding's candidates): readable in an assertion's diff."""
    ordered = sorted(urls)
    return [f"{session}@{ordered.index(url)}" for session, url in placed]


def _replay_sequence(
    tmp_path: Path, name: str, config: dict[str, Any], steps: list[str | float]
) -> tuple[list[str], list[str]]:
    """``steps`` (a session's call, or a pause in seconds) through the real router and
    through the model: each call as ``session@k`` (:func:`_named`), the router's and the
    model's."""
    with _fleet(tmp_path, name, config) as live:
        for step in steps:
            if isinstance(step, str):
                _send(live.url, step)
            else:
                time.sleep(step)
        real = list(live.arrivals)
        urls = live.urls
    model = _Model.of(config, urls)
    for step in steps:
        if isinstance(step, str):
            model.call(step)
        else:
            model.wait(step)
    return _named(real, urls), _named(model.placed, urls)


def test_program_round_robin_binds_in_url_order_until_the_paused_retention_releases(
    tmp_path: Path,
) -> None:
    """First calls cycle over the workers sorted by URL; each program's second call goes
    home; once its pause outlasts ``paused_retention_ttl_seconds`` (1 s; released at a
    metrics tick, every 0.25 s; the test waits 2 s) a program's next call is a new
    program's, bound by the count (7 bindings so far: the second worker, then the third)."""
    config = {
        "binding_strategy": "program_round_robin",
        "paused_retention_ttl_seconds": 1.0,
        "metrics_interval_seconds": 0.25,
    }
    sessions = [f"s{i}" for i in range(7)]
    steps: list[str | float] = [s for s in sessions for _ in range(2)]
    steps += [2.0, "s0", "s1"]
    real, model = _replay_sequence(tmp_path, "rr", config, steps)
    homes = [f"{s}@{i % 3}" for i, s in enumerate(sessions)]
    assert real[:14] == [h for h in homes for _ in range(2)]
    assert real[14:] == ["s0@1", "s1@2"]  # released: bound afresh, not home
    assert model == real


def test_consistent_hash_binding_hashes_the_session_over_the_urls(tmp_path: Path) -> None:
    """The default binding: the ring of the ``consistent_hash`` policy over the workers'
    URLs, keyed by the ``X-Session-ID``. With ``binding_only`` a program's later call goes
    home at once even with every engine reporting requests waiting (no admission gate;
    without ``binding_only`` each would be retained: its program paused as its call
    ended, the acting TTL being 0)."""
    config = {"binding_only": True, "metrics_interval_seconds": 0.25}
    sessions = [f"swe-{i:06d}" for i in range(12)] + [f"tau-{i}" for i in range(12)]
    with _fleet(tmp_path, "hash", config) as live:
        for session in sessions:
            _send(live.url, session)
        _queue_engines(live, dict.fromkeys(live.urls, 2))
        for session in sessions:
            _send(live.url, session)
        real = list(live.arrivals)
        urls = live.urls
    model = _Model.of(config, urls)
    for session in sessions:
        model.call(session)
    model.wait(1.0)
    for session in sessions:
        model.call(session, dict.fromkeys(urls, 2))
    placed = _named(real, urls)
    assert len({p.split("@")[1] for p in placed}) > 1  # the ring spreads them
    assert placed[len(sessions) :] == placed[: len(sessions)]  # and each goes home
    assert _named(model.placed, urls) == placed


def test_least_program_count_counts_acting_and_retained_programs(tmp_path: Path) -> None:
    """``least_program_count`` binds a new program to the worker with the fewest live
    programs (ties: the first URL). With a window of one tool-call interval a worker's
    acting TTL is 0 until one of its programs has come back once (its programs pause as
    their call ends: not counted), then as long as the cap (a miss priced at 1000 s, the
    cap 300 s: they act past the test, counted). Then the second and third workers'
    engines report requests waiting: a new program bound to the third is retained (and
    counted), an acting program's call goes to the second at once, the next new program
    goes to the first, and the retained call is served once a poll reads the engines
    drained."""
    config = {
        "binding_strategy": "least_program_count",
        "stats_window_size": 1,
        "max_acting_ttl_seconds": 300,
        "metrics_interval_seconds": 0.5,
        "prefill_cost_model": {"intercept_seconds": 1000},
    }
    steps = ["A", "A", "B", "C", "B", "D", "E", "C", "F"]
    with _fleet(tmp_path, "lpc", config) as live:
        for session in steps:
            _send(live.url, session)
        gated = sorted(live.urls)[1:]
        _queue_engines(live, dict.fromkeys(gated, 2))
        held = _retained(live, "G", gated[1], 1)
        _send(live.url, "B")  # acting: straight to its worker, gate or not
        _send(live.url, "H")
        assert "G" not in _sessions(live)  # still retained
        _drain_engines(live)
        held.join(PATIENCE_S)
        real = list(live.arrivals)
        urls = live.urls
    assert not held.is_alive()
    model = _Model.of(config, urls)
    for session in steps:
        model.call(session)
    model.wait(1.0)  # the polls that read the engines' queues
    for session in ["G", "B", "H"]:
        model.call(session, dict.fromkeys(gated, 2))
    model.poll()
    assert _named(real, urls) == [
        *("A@0", "A@0", "B@1", "C@1", "B@1", "D@2", "E@2", "C@1", "F@2"),
        *("B@1", "H@0", "G@2"),
    ]
    assert _named(model.placed, urls) == _named(real, urls)


@pytest.mark.parametrize(("order", "resumed"), [("mru", "P3 P2 P1"), ("fcfs", "P1 P2 P3")])
def test_retained_calls_resume_in_order_one_at_a_time(
    tmp_path: Path, order: str, resumed: str
) -> None:
    """``least_program_count`` counts a program whose call is in flight (Q: R goes to the
    second worker) and, with the acting TTL 0 (the window of 100 intervals is not full),
    no program paused between calls (P1 to P3 all bind to the first worker). With one
    active program per worker and the first worker's engine reporting requests waiting,
    their next calls are retained (a new program, N, goes elsewhere); once a poll reads
    the engine drained they are served one at a time in ``resume_order``: ``mru``, the
    most recently finished first, or ``fcfs``, the first retained first."""
    config = {
        "binding_strategy": "least_program_count",
        "max_active_programs_per_target": 1,
        "resume_order": order,
        "metrics_interval_seconds": 0.5,
    }
    with _fleet(tmp_path, order, config) as live:
        first = sorted(live.urls)[0]
        release = threading.Event()
        next(s for s in live.stubs if s.url == first).hold["Q"] = release
        in_flight = threading.Thread(target=_send, args=(live.url, "Q"), daemon=True)
        in_flight.start()
        _wait_for("Q at its worker", lambda: "Q" in _sessions(live))
        _send(live.url, "R")
        release.set()
        in_flight.join(PATIENCE_S)
        for session in ["P1", "P2", "P3"]:
            _send(live.url, session)
        _queue_engines(live, {first: 2})
        held = [_retained(live, s, first, n) for n, s in enumerate(["P1", "P2", "P3"], 1)]
        _send(live.url, "N")
        _drain_engines(live)
        for thread in held:
            thread.join(PATIENCE_S)
        real = list(live.arrivals)
        urls = live.urls
    assert not in_flight.is_alive() and not any(t.is_alive() for t in held)
    model = _Model.of(config, urls)
    model.call("Q", ends=False)
    model.call("R")
    model.end("Q")
    for session in ["P1", "P2", "P3"]:
        model.call(session)
    model.wait(1.0)
    for session in ["P1", "P2", "P3", "N"]:
        model.call(session, {first: 2})
    model.poll()
    assert _named(real, urls) == [
        *("Q@0", "R@1", "P1@0", "P2@0", "P3@0", "N@1"),
        *(f"{s}@0" for s in resumed.split()),
    ]
    assert _named(model.placed, urls) == _named(real, urls)


def test_the_count_bound_retains_a_program_behind_an_acting_one_until_force_resume(
    tmp_path: Path,
) -> None:
    """With one active program per worker, A acting on the first worker (its window of
    one interval full once it came back: a 300 s TTL) holds the next program bound
    there by ``program_round_robin`` (P), while the other workers serve theirs at once;
    P passes the count gate at its force-resume deadline (3 s after it arrived)."""
    config = {
        "binding_strategy": "program_round_robin",
        "max_active_programs_per_target": 1,
        "stats_window_size": 1,
        "max_acting_ttl_seconds": 300,
        "force_resume_timeout_seconds": 3.0,
        "metrics_interval_seconds": 0.5,
        "prefill_cost_model": {"intercept_seconds": 1000},
    }
    steps = ["A", "A", "X", "Y"]
    with _fleet(tmp_path, "forced", config) as live:
        for session in steps:
            _send(live.url, session)
        held = _retained(live, "P", sorted(live.urls)[0], 1)
        _send(live.url, "X")
        assert "P" not in _sessions(live)  # still retained
        held.join(PATIENCE_S)
        real = list(live.arrivals)
        urls = live.urls
    assert not held.is_alive()
    model = _Model.of(config, urls)
    for session in [*steps, "P", "X"]:
        model.call(session)
    model.wait(3.0)
    model.poll()
    assert _named(real, urls) == ["A@0", "A@0", "X@1", "Y@2", "X@1", "P@0"]
    assert _named(model.placed, urls) == _named(real, urls)


def test_consistent_hash_binding_gives_a_shared_hash_to_the_later_url(tmp_path: Path) -> None:
    """The router builds the binding's ring over its workers sorted by URL, so of two
    workers' virtual nodes at one hash the later URL's stays, whatever the order of
    ``--worker-urls``: two stubs on loopback addresses whose URLs share a node's hash
    (found afresh each run), and sessions whose key falls just before it, go where the
    model sends them given the URLs either way round."""
    port_a, port_b = free_port(), free_port()
    url_a, url_b, point = _colliding_urls(port_a, port_b)
    sessions = [*_keys_just_before(point, (url_a, url_b), 3), "o1", "o2", "o3"]
    addresses = [_host_port(url_a), _host_port(url_b)]
    with _fleet(tmp_path, "collision", {}, addresses) as live:
        for session in sessions:
            _send(live.url, session)
        real = dict(live.arrivals)
    later = max(url_a, url_b)
    assert all(real[s] == later for s in sessions[:3])
    for urls in ([url_a, url_b], [url_b, url_a]):
        model = _Model.of({}, urls)
        for session in sessions:
            model.call(session)
        assert dict(model.placed) == real


def _colliding_urls(port_a: int, port_b: int) -> tuple[str, str, int]:
    """Two worker URLs on loopback addresses (``127.0.0.k``), one on each port, with a
    virtual node each at one hash, and that hash (about 20 addresses tried each)."""
    seen: tuple[dict[int, str], dict[int, str]] = ({}, {})
    for k in range(1, 255):
        for side, port in enumerate((port_a, port_b)):
            url = f"http://127.0.0.{k}:{port}"
            for i in range(VIRTUAL_NODES_PER_WORKER):
                point = fbi_hash(f"{url}:{i}")
                other = seen[1 - side].get(point)
                if other is not None:
                    pair = (url, other) if side == 0 else (other, url)
                    return pair[0], pair[1], point
                seen[side][point] = url
    raise AssertionError("no two loopback URLs share a node's hash")


def _keys_just_before(point: int, urls: tuple[str, ...], count: int) -> list[str]:
    """``count`` sessions whose key the ring over ``urls`` places at node ``point``: the
    first node at or after the key's hash, wrapping around."""
    points = sorted({fbi_hash(f"{u}:{i}") for u in urls for i in range(VIRTUAL_NODES_PER_WORKER)})
    found = []
    for i in itertools.count():
        session = f"k{i}"
        at = bisect_left(points, fbi_hash(session_key(session))) % len(points)
        if points[at] == point:
            found.append(session)
            if len(found) == count:
                break
    return found


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port
