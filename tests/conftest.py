"""Shared fixtures: where the repo's samples and the real traces in ../shared live."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

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
