"""The real vllm-router's round_robin counts every request it forwards, GET /metrics
included: why validate reads no gauges through the router during a live run (a poll
every half second moved round_robin's placement; replay/validation/fleet_live.py)."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

from tests.router_bin import router_or_skip
from ttlctl.server import client, router
from ttlctl.server.owned import OwnedServer
from ttlctl.server.process import free_port

#: a worker that answers everything with 200 and notes each request's method and path
WORKER = textwrap.dedent(
    """
    import json, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    log = open(sys.argv[2], "a", buffering=1)
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a): pass
        def _ok(self, body):
            self.send_response(200); self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body))); self.end_headers()
            self.wfile.write(body)
        def do_GET(self):
            if self.path != "/health":
                log.write("GET " + self.path + "\\n")
            self._ok(json.dumps({"data": [{"id": "m"}]}).encode())
        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            log.write("POST " + self.path + "\\n")
            self._ok(json.dumps({"choices": [{"text": "x"}]}).encode())
    HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
    """
)


def _server(cmd: list[str], log: Path, url: str, name: str) -> OwnedServer:
    env = {"PATH": "/usr/bin:/bin"}
    return OwnedServer(cmd, env, log, url, startup_timeout_s=60.0, stop_grace_s=5.0, name=name)


def test_round_robin_counts_metrics_polls_with_the_calls(tmp_path: Path) -> None:
    binary = router_or_skip()
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    workers, notes = [], []
    for i in (1, 2):
        port = free_port()
        notes.append(tmp_path / f"w{i}.txt")
        workers.append(
            _server(
                [sys.executable, str(script), str(port), str(notes[-1])],
                tmp_path / f"w{i}.log",
                f"http://127.0.0.1:{port}",
                f"worker {i}",
            )
        )
    port = free_port()
    command = router.router_command(
        [w.url for w in workers],
        port=port,
        policy="round_robin",
        command=binary,
        prometheus_port=free_port(),
    )
    front = _server(command, tmp_path / "router.log", f"http://127.0.0.1:{port}", "vllm-router")
    with workers[0], workers[1], front:
        for path in notes:
            path.write_text("")
        body = {"model": "m", "prompt": "hi", "max_tokens": 1}
        for _ in range(4):  # a call, then a poll of /metrics, four times
            client.text(front.url, "/v1/completions", body, method="POST")
            client.text(front.url, "/metrics")
        time.sleep(0.2)
        seen = [p.read_text().splitlines() for p in notes]
    # the counter is shared: every call went to one worker, every poll to the other
    calls = [sum(1 for line in s if line == "POST /v1/completions") for s in seen]
    polls = [sum(1 for line in s if line == "GET /metrics") for s in seen]
    assert sorted(calls) == [0, 4] and sorted(polls) == [0, 4], seen
    assert calls.index(4) != polls.index(4)
