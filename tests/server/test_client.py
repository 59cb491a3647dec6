"""ttlctl/server/client.py, sse.py, cache.py and vocab.py against a stub HTTP server.

The stub speaks just enough of vLLM's routes to exercise the door's answers and its
one-line errors; the real server is exercised by tests/live and tests/profiles.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar

import pytest

from tests.http_stub import serving
from ttlctl.server import client, sse
from ttlctl.server.cache import reset_prefix_cache
from ttlctl.server.client import HTTPStatusError, ServerError
from ttlctl.server.process import free_port
from ttlctl.server.vocab import LOW_IDS, token_pool


class _Stub(BaseHTTPRequestHandler):
    vocab: ClassVar[int] = 1000
    reset_status: ClassVar[int] = 200
    detokenize: ClassVar[bool] = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, code: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/text":
            self._send(200, b"not json", "text/plain")
        else:
            self._send(400, json.dumps({"error": {"message": "bad\n   request"}}).encode())

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.path == "/detokenize" and self.detokenize:
            (token,) = body["tokens"]
            text = "x" if token < self.vocab else ""
            self._send(200, json.dumps({"prompt": text}).encode())
        elif self.path == "/reset_prefix_cache":
            self._send(self.reset_status, b"")
        elif self.path == "/v1/completions":
            chunks = [{"choices": [{"text": "a"}]}, {"error": {"message": "boom"}}]
            data = b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks)
            self._send(200, data, "text/event-stream")
        else:
            self._send(404, json.dumps({"detail": "Not Found"}).encode())


@pytest.fixture
def stub() -> Iterator[tuple[str, type[_Stub]]]:
    handler = type("Handler", (_Stub,), {})
    with serving(handler) as url:
        yield url, handler


def test_normalise_url() -> None:
    assert client.normalise_url(" 127.0.0.1:8000/v1/ ") == "http://127.0.0.1:8000"
    assert client.normalise_url("https://h:1") == "https://h:1"


def test_failures_are_one_line_naming_the_url(stub: tuple[str, type[_Stub]]) -> None:
    url, _ = stub
    with pytest.raises(HTTPStatusError) as info:
        client.text(url, "/x")
    assert str(info.value) == f"{url}: HTTP 400 from /x: bad request" and info.value.status == 400
    with pytest.raises(ServerError, match=r"/text did not answer JSON$"):
        client.json_answer(url, "/text")
    closed = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ServerError) as refused:
        client.text(closed, "/v1/models")
    assert str(refused.value) == f"{closed}: connection refused (is a vLLM server running there?)"


def test_a_stream_that_fails_midway_is_a_server_error(stub: tuple[str, type[_Stub]]) -> None:
    url, _ = stub
    got = []
    with pytest.raises(ServerError) as info:
        for _, chunk in sse.stream(url, "/v1/completions", {"prompt": [1]}, timeout_s=5.0):
            got.append(chunk)
    assert got == [{"choices": [{"text": "a"}]}]
    assert str(info.value) == f"{url}: /v1/completions failed: boom"


def test_reset_prefix_cache_says_whether_the_server_has_the_route(
    stub: tuple[str, type[_Stub]],
) -> None:
    url, handler = stub
    assert reset_prefix_cache(url) is True
    handler.reset_status = 404
    assert reset_prefix_cache(url) is False
    handler.reset_status = 500
    with pytest.raises(HTTPStatusError, match="HTTP 500 from /reset_prefix_cache"):
        reset_prefix_cache(url)


@pytest.mark.parametrize("vocab", [1000, 4096, 151_936])
def test_token_pool_is_the_served_vocabulary(stub: tuple[str, type[_Stub]], vocab: int) -> None:
    url, handler = stub
    handler.vocab = vocab
    assert token_pool(url, "m") == list(range(LOW_IDS, vocab))
    assert token_pool(url, "m", vocab_size=50) == list(range(LOW_IDS, 50))


def test_token_pool_without_detokenize_asks_for_the_vocabulary(
    stub: tuple[str, type[_Stub]],
) -> None:
    url, handler = stub
    handler.detokenize = False
    with pytest.raises(ServerError, match="give its vocab_size") as info:
        token_pool(url, "m")
    assert url in str(info.value) and "\n" not in str(info.value)
    handler.detokenize, handler.vocab = True, 20
    with pytest.raises(ServerError, match="too small a vocabulary"):
        token_pool(url, "m")
