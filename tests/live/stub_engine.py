"""A stand-in for a vLLM server that validate starts (``--engine-cmd "python
tests/live/stub_engine.py"``): it answers what validate asks first, and notes the rest.

It takes ``--host`` and ``--port`` (any other argument is ignored), writes a file named by
its process id into the folder ``$STUB_PIDS``, answers ``/health``, ``/v1/models``, ``/version`` and
``/metrics`` (a ``vllm:cache_config_info`` with the labels ``$STUB_CACHE``), and appends
every other request's path to ``$STUB_OTHERS`` (a warm-up or a live run would send some).
"""

from __future__ import annotations

import argparse
import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        answers = {
            "/health": "",
            "/v1/models": json.dumps({"data": [{"id": "stub", "max_model_len": 2048}]}),
            "/version": json.dumps({"version": "0.32.0"}),
            "/metrics": f"vllm:cache_config_info{{{os.environ['STUB_CACHE']}}} 1.0\n",
        }
        if self.path not in answers:
            self._other()
            return
        self.send_response(200)
        self.end_headers()
        self.wfile.write(answers[self.path].encode())

    def do_POST(self) -> None:
        self._other()

    def _other(self) -> None:
        with open(os.environ["STUB_OTHERS"], "a") as out:
            out.write(self.path + "\n")
        self.send_error(404)

    def log_message(self, *args: object) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args, _ = parser.parse_known_args()
    (Path(os.environ["STUB_PIDS"]) / str(os.getpid())).touch()
    ThreadingHTTPServer((args.host, args.port), _Handler).serve_forever()


if __name__ == "__main__":
    main()
