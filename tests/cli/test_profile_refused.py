"""Commands that read a profile refuse one with impossible numbers in one line naming the
file and the field (the rule itself: tests/profiles/test_profile_numbers.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from profiles.shipped import DATA
from tests.cli.refusal import refused


def test_bundle_build_and_replay_refuse_negative_prefill_costs(
    tmp_path: Path, small_inputs: dict[str, Path]
) -> None:
    """Regression: ``bundle build`` and ``replay`` took a profile whose prefill a, b and q
    were all -1 and exited 0 (replay printed a TTFT of -1379500 s)."""
    doc: dict[str, Any] = json.loads((DATA / "llama-3.1-8b-h100.json").read_text())
    doc["prefill"] |= {"a": -1.0, "b": -1.0, "q": -1.0}
    bad = tmp_path / "neg.json"
    bad.write_text(json.dumps(doc))
    out = tmp_path / "out.json"
    starts = f"error: {bad}: prefill.a is -1.0"
    fit = str(small_inputs["fit"])
    refused(["bundle", "build", "--fit", fit, "--profile", str(bad), "-o", str(out)], out, starts)
    replay = ["replay", str(small_inputs["trace"]), "--policy", "vllm", "--no-timing"]
    refused([*replay, "--profile", str(bad), "--json", str(out)], out, starts)
