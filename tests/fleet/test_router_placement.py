"""The router models place sessions where the real ``vllm-router`` does, given its workers'
URLs: the real binary in front of three stub workers (HTTP servers that answer a
completion and note the ``X-Session-ID`` they got; no vLLM), 40 sessions sent through it
one after another, and each session's worker compared with the model's choice for the
same URLs. The stubs' ports are drawn afresh every run, so each run checks another ring.
Skipped only where vllm-router cannot run."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from replay.fleet.routers import RouterSettings, make_router
from replay.fleet.routers.base import RoutedCall
from replay.fleet.routers.consistent_hash import ConsistentHash
from tests.fleet.views import idle
from tests.http_stub import json_reply, serving
from tests.router_bin import router_or_skip, send_session_call, started_router
from ttlctl.server import router
from ttlctl.server.process import free_port

SESSIONS = [f"swe-{i:06d}" for i in range(20)] + [f"tau-{i}" for i in range(20)]


def _worker(seen: list[str], lock: threading.Lock) -> type[BaseHTTPRequestHandler]:
    class Worker(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return None

        def do_GET(self) -> None:
            json_reply(self, {"object": "list", "data": [{"id": "m", "object": "model"}]})

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with lock:
                seen.append(self.headers.get("x-session-id") or "")
            json_reply(
                self,
                {
                    "id": "c",
                    "object": "text_completion",
                    "choices": [{"index": 0, "text": "x", "finish_reason": "length"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                },
            )

    return Worker


@contextmanager
def _fleet(
    tmp_path: Path, policy: str, workers: int
) -> Iterator[tuple[str, list[str], list[list[str]]]]:
    """The real router with ``policy`` in front of ``workers`` stubs: its URL, the stubs'
    URLs (``--worker-urls``, in order) and each stub's sessions in arrival order."""
    command = router_or_skip()
    lock = threading.Lock()
    seen: list[list[str]] = [[] for _ in range(workers)]
    with ExitStack() as stack:
        urls = [stack.enter_context(serving(_worker(seen[i], lock))) for i in range(workers)]
        port = free_port()
        front = started_router(
            router.router_command(
                urls, port=port, policy=policy, command=command, prometheus_port=free_port()
            ),
            port,
            tmp_path / f"{policy}-router.log",
            policy,
        )
        stack.enter_context(front)
        yield front.url, urls, seen


def _send(url: str, session: str) -> None:
    send_session_call(url, session, [1, 2, 3], 30.0)


def _placement(seen: list[list[str]]) -> dict[str, int]:
    return {s: r for r, sessions in enumerate(seen) for s in sessions}


@pytest.mark.parametrize("policy", ["consistent_hash", "sticky_least_loaded"])
def test_the_model_places_each_session_where_the_real_router_does(
    tmp_path: Path, policy: str
) -> None:
    with _fleet(tmp_path, policy, 3) as (url, urls, seen):
        for session in SESSIONS:
            _send(url, session)
            _send(url, session)  # and back to the same worker
    live = _placement(seen)
    assert sorted(live) == sorted(SESSIONS)  # every session reached exactly one worker
    assert sum(len(s) for s in seen) == 2 * len(SESSIONS)
    model = make_router(RouterSettings(policy), 3, seed=0, block_size=16, worker_urls=urls)
    view = idle(3)
    placed = {}
    for session in SESSIONS:
        placed[session] = model.route(RoutedCall(session, 0, ((1, 3),), 3), view, 0.0)
        model.route(RoutedCall(session, 1, ((1, 3),), 3), view, 0.0)
    assert placed == live
    # the placement follows the URLs: the default names give another one
    default = ConsistentHash(3)
    if policy == "consistent_hash":
        assert any(default.owner(s) != live[s] for s in SESSIONS)


def test_round_robin_follows_the_worker_order_the_real_router_logs(tmp_path: Path) -> None:
    """vllm-router 0.1.17 keeps its workers in a hash map keyed by a random id per
    worker, so ``round_robin`` cycles in an order drawn at each start, which it logs once
    ready (``Router ready | workers: [...]``). The model cycling over the logged order
    from its first worker places every call where the real router did; over three
    starts."""
    orders = []
    for start in range(3):
        folder = tmp_path / str(start)
        folder.mkdir()
        with _fleet(folder, "round_robin", 3) as (url, urls, seen):
            for i in range(7):
                _send(url, f"s{i}")
            log = (folder / "round_robin-router.log").read_text(errors="replace")
        order = router.worker_order(log)
        assert order is not None and sorted(order) == sorted(urls), log[-2000:]
        live = {s: urls[r] for r, sessions in enumerate(seen) for s in sessions}
        model = make_router(RouterSettings("round_robin"), 3, seed=0, block_size=16)
        view = idle(3)
        placed = {
            f"s{i}": order[model.route(RoutedCall(f"s{i}", 0, ((1, 3),), 3), view, 0.0)]
            for i in range(7)
        }
        assert placed == live
        orders.append([urls.index(u) for u in order])
    # the order is the router's, not --worker-urls': an order it logged is a
    # permutation of the three, and the first call went to its first worker
    assert all(sorted(o) == [0, 1, 2] for o in orders)


def test_worker_order_reads_the_ready_line_of_a_real_log() -> None:
    """The line as vllm-router 0.1.17 wrote it at a real start (colour escapes and all)."""
    line = (
        "\x1b[2m2026-12-01 22:51:58\x1b[0m \x1b[32m INFO\x1b[0m \x1b[2mvllm_router_rs::se"
        "rver\x1b[0m\x1b[2m:\x1b[0m \x1b[2msrc/server.rs\x1b[0m\x1b[2m:\x1b[0m\x1b[2m1192"
        ':\x1b[0m Router ready | workers: ["http://127.0.0.1:43493", "http://127.0.0.1:32'
        '955", "http://127.0.0.1:35039"]\n'
    )
    assert router.worker_order("DEBUG: Creating AppContext\n" + line) == [
        "http://127.0.0.1:43493",
        "http://127.0.0.1:32955",
        "http://127.0.0.1:35039",
    ]
    assert router.worker_order("Router ready | workers: [not json\n") is None
    assert router.worker_order("") is None
