"""The vLLM backend tells a replay's progress as the fast one does (replay/progress.py):
rising counts of calls done that end at the trace's calls, one engine (the harness) and a
fleet (the fast fleet's loop over vLLM's schedulers); the document is unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from replay.replay_run import replay_doc
from tests.replay.test_replay_progress import assert_rising_to_the_calls, request, told
from tests.tune.inputs import write_trace


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_trace(tmp_path_factory.mktemp("progress") / "t.parquet", programs=5, seed=3)


@pytest.mark.parametrize("fleet", [False, True], ids=["one engine", "fleet"])
def test_the_vllm_backend_tells_the_calls_done(trace: Path, fleet: bool) -> None:
    req = request(trace, fleet=fleet, backend="vllm")
    by_policy, doc = told(req)
    assert doc == replay_doc(req)
    assert_rising_to_the_calls(by_policy, doc)
