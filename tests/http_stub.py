"""A local HTTP server around a test's request handler, for stubs of a vLLM server."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Server(ThreadingHTTPServer):
    # a decode batch opens 8 connections at once: the default listen backlog (5)
    # would delay some by a SYN retry (1 s), which no real server's backlog does
    request_queue_size = 64


@contextmanager
def serving(
    handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1", port: int = 0
) -> Iterator[str]:
    """Serve ``handler`` on ``host``:``port`` (0: a free port) in a thread; yields its
    base URL."""
    server = _Server((host, port), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def json_reply(handler: BaseHTTPRequestHandler, doc: object, code: int = 200) -> None:
    """Answer ``handler``'s request with ``doc`` as JSON and HTTP ``code``."""
    body = json.dumps(doc).encode()
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def stream_reply(handler: BaseHTTPRequestHandler, chunk: object) -> None:
    """Answer ``handler``'s completion request as an OpenAI stream of one ``chunk`` then
    ``[DONE]`` (HTTP 200, server-sent events)."""
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.end_headers()
    handler.wfile.write(f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode())
