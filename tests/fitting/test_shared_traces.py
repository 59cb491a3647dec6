"""Fit every real trace in ../shared/traces, build a bundle, and read it back sensibly."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from ttlctl.cli import app
from ttlctl.trace import io as trace_io

FOLDERS = [
    "claude-code",
    "mini-swe-agent",
    "swe-agent",
    "litellm",
    "mooncake",
    "tracelab",
    "trtllm-scaffolding",
]


@pytest.mark.parametrize("folder", FOLDERS)
def test_fit_and_bundle_every_shared_trace(
    shared_traces: Path, tmp_path: Path, folder: str
) -> None:
    runner = CliRunner()
    trace = tmp_path / "trace.parquet"
    res = runner.invoke(app, ["ingest", str(shared_traces / folder), "-o", str(trace)])
    assert res.exit_code == 0, res.output
    fit = tmp_path / "fit.json"
    # independent count of the pauses the fit should have used
    frame = trace_io.read(trace)
    pauses = (
        frame.filter(pl.col("tool").is_not_null())
        .select(pl.coalesce("tool_s", "gap_s").alias("pause"))
        .drop_nulls()
    )
    args = ["fit", str(trace), "-o", str(fit), "--bootstrap", "100"]
    res = runner.invoke(app, args)
    if pauses.height == 0:  # a format without timings: nothing to fit unless allowed
        assert res.exit_code == 2 and "no tool pause to fit" in res.stderr, res.output
        assert not fit.exists()
        res = runner.invoke(app, [*args, "--allow-empty"])
    assert res.exit_code == 0, res.output
    doc = json.loads(fit.read_text())
    kept = pauses.filter(pl.col("pause") <= 3600.0)
    assert doc["input"]["calls"] == frame.height
    assert doc["global"]["n"] == kept.height
    assert doc["input"]["abandoned_pauses"] == pauses.height - kept.height
    assert sum(t["n"] for t in doc["tools"].values()) == kept.height
    assert all(len(t["cdf"]["x"]) <= 1024 for t in doc["tools"].values())

    bundle_path = tmp_path / "bundle.json"
    res = runner.invoke(
        app,
        [
            "bundle",
            "build",
            "--fit",
            str(fit),
            "--profile",
            "llama-3.1-8b-h100",
            "-o",
            str(bundle_path),
        ],
    )
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["bundle", "inspect", str(bundle_path), "--queue-delay-seconds", "2"])
    assert res.exit_code == 0, res.output
    assert "τ* @128k" in res.output

    from ttlctl import bundle

    policy = bundle.policy_from(bundle.read(bundle_path))
    for tool in [*list(doc["tools"])[:5], None]:
        ttls = [policy.decide(tool, c, queue_delay_s=2.0).ttl_s for c in (1e3, 8e3, 32e3, 128e3)]
        assert ttls == sorted(ttls), (tool, ttls)  # more context to rebuild: never a shorter pin
        assert all(t >= 0 for t in ttls)
