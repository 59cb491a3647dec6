"""Bundles for tests: a sealed cold-start bundle (no fit) with the tiny CPU profile."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fitting.policy_params import PolicyParams
from ttlctl import bundle_make

REPO = Path(__file__).resolve().parents[1]
PROFILE = REPO / "profiles" / "data" / "tiny-cpu.json"
EMPTY_FIT: dict[str, Any] = {"schema": "ttlctl.fit/1", "tools": {}, "global": None}


def write_bundle(path: Path, **params: Any) -> Path:
    """A sealed bundle with an empty fit (cold start) and the tiny CPU profile."""
    doc = bundle_make.build(
        EMPTY_FIT,
        json.loads(PROFILE.read_text()),
        PolicyParams(**params),
        created="2026-11-29T00:00:00+00:00",
        ttlctl_version="test",
        provenance={"test": True},
    )
    bundle_make.write(doc, path)
    return path
