"""``ttlctl replay --replicas N --router R --backend vllm``: vLLM's schedulers behind a router."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import vllm
from typer.testing import CliRunner

from replay.figures import ReplayDoc
from tests.documents import conforms
from tests.tune.inputs import write_trace
from ttlctl.cli import app


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_trace(tmp_path_factory.mktemp("vfleet") / "t.parquet", programs=5, seed=4)


def _replay(trace: Path, *args: str) -> tuple[int, str, dict[str, Any] | None]:
    res = CliRunner().invoke(
        app,
        [
            "replay", str(trace), "--kv-tokens", "12000", "--concurrency", "4",
            "--no-timing", "--json", "-", *args,
        ],
    )  # fmt: skip
    doc = json.loads(res.stdout) if res.exit_code == 0 else None
    return res.exit_code, res.output, doc


@pytest.mark.parametrize("router", ["round-robin", "pin-aware"])
def test_a_vllm_fleet_has_the_fast_fleets_fields(trace: Path, router: str) -> None:
    fleet = ["--replicas", "2", "--router", router, "--policy", "vllm", "--policy", "static-ttl"]
    code, out, fast = _replay(trace, *fleet)
    assert code == 0, out
    code, out, ours = _replay(trace, *fleet, "--backend", "vllm")
    assert code == 0, out
    assert fast is not None and ours is not None
    conforms(ours, ReplayDoc)
    assert ours["backend"] == "vllm" and ours["vllm_version"] == vllm.__version__
    assert ours["fleet"] == fast["fleet"]
    for f, v in zip(fast["results"], ours["results"], strict=True):
        assert set(f) <= set(v)
        assert v["backend"] == "vllm" and v["router"] == fast["fleet"]
        assert v["scheduler"] == ("Scheduler" if v["policy"] == "vllm" else "TTLScheduler")
        # the same calls on the same replicas (tests/vllmsim/test_fleet_differential.py
        # compares every call)
        assert [r["llm_calls"] for r in v["per_replica"]] == [
            r["llm_calls"] for r in f["per_replica"]
        ]
        assert (v["pins_wasted"], v["miss_reasons"]) == (f["pins_wasted"], f["miss_reasons"])
        assert v["jct_mean_s"] == pytest.approx(f["jct_mean_s"], rel=1e-9)
    pinned = ours["results"][1]
    assert pinned["pins"]["made"] > 0 and pinned["plugin_counters"]["made"] > 0


def test_an_async_vllm_fleet(trace: Path) -> None:
    """``--async-scheduling``: vLLM's ``AsyncScheduler`` under every replica; the same
    calls served as the fast fleet's async replicas serve
    (``test_fleet_differential.py`` compares them call by call)."""
    fleet = ["--replicas", "2", "--router", "round-robin", "--policy", "static-ttl"]
    code, out, sync = _replay(trace, *fleet, "--backend", "vllm")
    assert code == 0, out
    code, out, fast = _replay(trace, *fleet, "--async-scheduling")
    assert code == 0, out
    code, out, ours = _replay(trace, *fleet, "--backend", "vllm", "--async-scheduling")
    assert code == 0, out
    assert sync is not None and fast is not None and ours is not None
    conforms(ours, ReplayDoc)
    (v,), (f,), (s,) = ours["results"], fast["results"], sync["results"]
    assert v["async_scheduling"] is True and v["scheduler"] == "TTLAsyncScheduler"
    assert s["async_scheduling"] is False
    assert [r["llm_calls"] for r in v["per_replica"]] == [r["llm_calls"] for r in f["per_replica"]]
    assert v["jct_mean_s"] == pytest.approx(f["jct_mean_s"], rel=1e-9)
    assert v["jct_mean_s"] != pytest.approx(s["jct_mean_s"], rel=1e-9)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "infercept"], "policy infercept does not map onto vLLM's scheduler"),
        (["--policy", "vllm", "--offload-tokens", "1000"], "--backend vllm has no offload tier"),
    ],
)
def test_bad_vllm_fleet_arguments(trace: Path, args: list[str], message: str) -> None:
    code, out, _ = _replay(trace, "--replicas", "2", "--backend", "vllm", *args)
    assert code == 2, out
    assert message in out and "Traceback" not in out
