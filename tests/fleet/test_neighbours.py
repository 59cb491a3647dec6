"""The other replicas kept busy while one is profiled (replay/validation/neighbours.py):
each serves one request after another until the block ends, then nothing more."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler

from replay.validation.neighbours import OUTPUT_TOKENS, PROMPT_TOKENS, kept_busy
from replay.validation.prompts import FIRST_ID
from tests.http_stub import serving


def _replica(bodies: list[dict[str, object]], lock: threading.Lock) -> type:
    class Replica(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return None

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            time.sleep(0.01)
            with lock:
                bodies.append(body)
            answer = json.dumps({"choices": [{"text": "x"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

    return Replica


def test_each_other_replica_serves_a_steady_stream_until_the_end() -> None:
    lock = threading.Lock()
    a: list[dict[str, object]] = []
    b: list[dict[str, object]] = []
    with serving(_replica(a, lock)) as url_a, serving(_replica(b, lock)) as url_b:
        with kept_busy([url_a, url_b], "m", vocab_size=500) as served:
            # until each has answered five (about 0.1 s; a loaded machine's pace is no figure)
            deadline = time.monotonic() + 30
            while min(served) < 5 and time.monotonic() < deadline:
                time.sleep(0.01)
        after = (len(a), len(b))
        time.sleep(0.2)
        assert (len(a), len(b)) == after  # nothing sent once the block ended
    assert served == [len(a), len(b)] and min(served) >= 5
    first = a[0]
    assert first["model"] == "m" and first["max_tokens"] == OUTPUT_TOKENS
    prompt = first["prompt"]
    assert isinstance(prompt, list) and len(prompt) == PROMPT_TOKENS
    assert all(FIRST_ID <= t < 500 for t in prompt)
    assert a[1]["prompt"] != prompt  # fresh tokens every time: never a prefix hit


def test_no_replica_to_keep_busy_is_a_no_op() -> None:
    with kept_busy([], "m") as served:
        pass
    assert served == []
