"""Emptying a server's prefix cache between measurements: ``POST /reset_prefix_cache``.

vLLM serves the route only in development mode (``VLLM_SERVER_DEV_MODE=1``); without
it the answer is 404 (or 405), which :func:`reset_prefix_cache` reports as False so
that the caller can warn once and carry on.
"""

from __future__ import annotations

from ttlctl.server import client
from ttlctl.server.client import HTTPStatusError

PATH = "/reset_prefix_cache"


def reset_prefix_cache(url: str, timeout_s: float = 60.0) -> bool:
    """Empty the prefix cache; False when the server has no such route (not dev mode).

    Any other failure is a :class:`~ttlctl.server.client.ServerError`.
    """
    try:
        client.text(url, PATH, method="POST", timeout_s=timeout_s)
    except HTTPStatusError as exc:
        if exc.status in (404, 405):
            return False
        raise
    return True
