"""Shared fixtures: where the repo's samples and the real traces in ../shared live, and a
fitted synthetic trace (two trusted tools and one rare one) built once per test session."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import Phase, settings

from ttlctl.server.owned import OwnedServer
from ttlctl.trace import io as trace_io

#: ``--hypothesis-profile=mutants`` (tests/tools/mutants.py): a failing case is reported as
#: found, not shrunk (a planted fault only needs to be caught)
settings.register_profile("mutants", phases=[Phase.explicit, Phase.reuse, Phase.generate])

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "samples"


def shared_traces_dir() -> Path:
    """../shared/traces next to the checkout (or $TTLCTL_SHARED_TRACES)."""
    env = os.environ.get("TTLCTL_SHARED_TRACES")
    return Path(env) if env else REPO.parent / "shared" / "traces"


@pytest.fixture
def samples() -> Path:
    return SAMPLES


@pytest.fixture
def shared_traces() -> Path:
    path = shared_traces_dir()
    if not path.is_dir():
        pytest.skip(
            f"real traces not found at {path} (a user's clone has none; "
            "set TTLCTL_SHARED_TRACES to run these tests)"
        )
    return path


def make_trace(path: Path, programs: int = 150, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    rows = []
    for p in range(programs):
        n = int(rng.integers(2, 12))
        t = float(p)
        for turn in range(n):
            last = turn == n - 1
            tool = None if last else str(rng.choice(["grep", "pytest", "web"], p=[0.6, 0.38, 0.02]))
            tool_s = None
            if tool == "grep":
                tool_s = float(np.round(rng.uniform(0.05, 0.4), 3))
            elif tool == "pytest":
                tool_s = float(np.round(rng.lognormal(1.5, 0.6), 3))
            elif tool == "web":
                tool_s = float(np.round(rng.uniform(5, 20), 3))
            rows.append(
                {
                    "program_id": f"p{p}",
                    "turn": turn,
                    "arrival_s": t,
                    "input_tokens": 2000 + 1500 * turn,
                    "output_tokens": 100,
                    "tool": tool,
                    "tool_s": tool_s,
                    "gap_s": None if tool_s is None else tool_s + 0.01,
                    "llm_s": 0.5,
                    "is_last": last,
                }
            )
            t += 0.5 + (tool_s or 0) + 0.01
    trace_io.write(pl.DataFrame(rows).lazy(), path)
    return path


@pytest.fixture(scope="session")
def synthetic_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_trace(tmp_path_factory.mktemp("trace") / "trace.parquet")


@pytest.fixture(scope="session")
def fit_doc(synthetic_trace: Path) -> dict[str, object]:
    from fitting.fit import FitConfig, fit_trace

    return fit_trace(trace_io.scan(synthetic_trace), FitConfig(bootstrap=200))


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``tiny`` preset as a servable model folder (tokenizer, random bf16 weights)."""
    from tests.vllm_server import build_tiny_model  # torch and transformers: only when asked

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model") / "tiny")


@pytest.fixture(scope="session")
def stock_server(
    tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OwnedServer]:
    """One stock vLLM for the session (tests/live/servers.py: ``stock_server``), started on
    first use: the live replays of tests/live/test_servers.py and the profile measurements
    of tests/profiles/test_measure_server.py run on it. Each of them resets its prefix cache
    first and reads the server's counters as differences, so none needs a fresh server
    (a start is 30–60 s). It serves a copy of the tiny model in a folder of its own: the
    fleet and stray-process tests look for processes naming ``tiny_model`` and must find
    none of theirs left, not this server."""
    from tests.live.servers import stock_server as new_stock_server  # replay.validation: 1-2 s

    work = tmp_path_factory.mktemp("stock-server")
    model = shutil.copytree(tiny_model, work / "model" / tiny_model.name)
    server = new_stock_server(model, work)
    with server:
        yield server
