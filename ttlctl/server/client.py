"""HTTP to a vLLM server: one request, its failure as one line, text and JSON answers.

Standard library only (``urllib``). Every failure to talk to the server is a
:class:`ServerError` (a :class:`~ttlctl.errors.TtlctlError` and a ``ValueError``) whose
message is one line naming the URL and the path: connection refused, no answer in
time, an HTTP error status (:class:`HTTPStatusError`, which keeps the status and the
server's own message), or an answer that is not JSON.
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.error
import urllib.request
from typing import Any

from ttlctl.errors import TtlctlError

#: characters of a server's own error message kept in ours
DETAIL_CHARS = 300
#: what a failed exchange with a server raises, besides the HTTP status errors
TRANSPORT_ERRORS = (urllib.error.URLError, OSError, http.client.HTTPException)


class ServerError(TtlctlError, ValueError):
    """The server cannot be used as asked (unreachable, an error status, a bad answer):
    one line naming its URL."""


class HTTPStatusError(ServerError):
    """The server answered with an HTTP error ``status``."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def normalise_url(url: str) -> str:
    """``host:port``, ``http://host:port/`` or ``…/v1`` → ``http://host:port``."""
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    if url.endswith("/v1"):
        url = url[: -len("/v1")]
    return url


def _detail(exc: urllib.error.HTTPError) -> str:
    """The server's own message in an error answer (vLLM: ``{"error": {"message": …}}``)."""
    try:
        data = json.loads(exc.read().decode("utf-8", "replace"))
        err = data.get("error", data) if isinstance(data, dict) else data
        text = str(err.get("message", err) if isinstance(err, dict) else err)
    except Exception:
        text = exc.reason if isinstance(exc.reason, str) else ""
    return " ".join(text.split())[:DETAIL_CHARS]


def failure(url: str, path: str, exc: BaseException, timeout_s: float) -> ServerError:
    """The one-line error of a failed exchange with ``url`` (``exc``: what urllib raised)."""
    if isinstance(exc, urllib.error.HTTPError):
        detail = _detail(exc)
        message = f"{url}: HTTP {exc.code} from {path}" + (f": {detail}" if detail else "")
        return HTTPStatusError(message, exc.code)
    reason: object = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, ConnectionRefusedError):
        return ServerError(f"{url}: connection refused (is a vLLM server running there?)")
    if isinstance(reason, TimeoutError | socket.timeout):
        return ServerError(f"{url}: no answer from {path} within {timeout_s:g} s")
    text = " ".join(str(reason).split()) or type(reason).__name__
    return ServerError(f"{url}: cannot talk to the server ({text})")


def open_url(
    url: str,
    path: str,
    body: Any | None = None,
    *,
    method: str = "GET",
    timeout_s: float = 30.0,
    headers: dict[str, str] | None = None,
) -> Any:
    """Send one request to ``url + path`` (``body`` as JSON); the open response.

    Raises :class:`ServerError` (or :class:`HTTPStatusError`) when it fails.
    """
    data = None if body is None else json.dumps(body).encode()
    hdrs = {"Content-Type": "application/json"} if data is not None else {}
    hdrs.update(headers or {})
    req = urllib.request.Request(url + path, data=data, method=method, headers=hdrs)
    try:
        return urllib.request.urlopen(req, timeout=timeout_s)
    except TRANSPORT_ERRORS as exc:
        raise failure(url, path, exc, timeout_s) from None


def text(
    url: str,
    path: str,
    body: Any | None = None,
    *,
    method: str = "GET",
    timeout_s: float = 30.0,
    headers: dict[str, str] | None = None,
) -> str:
    """The whole answer to one request, as text (:class:`ServerError` when it fails)."""
    resp = open_url(url, path, body, method=method, timeout_s=timeout_s, headers=headers)
    try:
        with resp:
            raw: bytes = resp.read()
    except TRANSPORT_ERRORS as exc:
        raise failure(url, path, exc, timeout_s) from None
    return raw.decode("utf-8", "replace")


def json_answer(
    url: str,
    path: str,
    body: Any | None = None,
    *,
    method: str = "GET",
    timeout_s: float = 30.0,
) -> Any:
    """The answer to one request, parsed as JSON (None: an empty answer)."""
    answer = text(url, path, body, method=method, timeout_s=timeout_s)
    try:
        return json.loads(answer) if answer.strip() else None
    except json.JSONDecodeError:
        raise ServerError(f"{url}: {path} did not answer JSON") from None
