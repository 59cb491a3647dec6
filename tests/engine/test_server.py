"""The plugin in a real vLLM server: ``--scheduler-cls`` by name, tags over HTTP, /metrics.

The slow tier (a server takes ~20 s to start): the engine core runs in its own
process, requests carry ``vllm_xargs`` (or an ``X-Session-ID`` header) and the
plugin's counters reach vLLM's ``/metrics`` through Prometheus multiprocess mode
(``PROMETHEUS_MULTIPROC_DIR``).
"""

from __future__ import annotations

import json
import random
import re
import urllib.request
from pathlib import Path
from typing import Any

from tests.bundles import write_bundle
from tests.vllm_server import VLLMServer
from ttlctl.engine import compat


def complete(
    server: VLLMServer,
    prompt: list[int],
    *,
    xargs: dict[str, Any] | None = None,
    session: str | None = None,
) -> int:
    """One completion of 4 tokens; returns its cached prompt tokens."""
    body: dict[str, Any] = {
        "model": server.model,
        "prompt": prompt,
        "max_tokens": 4,
        "ignore_eos": True,
        "temperature": 0.0,
    }
    if xargs:
        body["vllm_xargs"] = xargs
    headers = {"Content-Type": "application/json"}
    if session:
        headers["X-Session-ID"] = session
    req = urllib.request.Request(
        f"{server.url}/v1/completions",
        data=json.dumps(body).encode(),
        headers=headers,
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        usage = json.loads(resp.read())["usage"]
    details = usage.get("prompt_tokens_details") or {}
    return int(details.get("cached_tokens") or 0)


def metric(text: str, name: str) -> float:
    found = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([0-9.e+-]+)$", text, re.M)
    assert found, f"{name} not in /metrics"
    return float(found.group(1))


def test_server_pins_by_xargs_and_session_header(tiny_model: Path, tmp_path: Path) -> None:
    bundle = write_bundle(tmp_path / "bundle.json", cold_start_ttl_s=60.0)
    log = tmp_path / "engine.jsonl"
    prom = tmp_path / "prom"
    prom.mkdir()
    env: dict[str, str | None] = {
        "TTLCTL_BUNDLE": str(bundle),
        "TTLCTL_LOG": str(log),
        "PROMETHEUS_MULTIPROC_DIR": str(prom),
        "VLLM_ENABLE_V1_MULTIPROCESSING": None,
        "TTLCTL_REPLICA": "replica-1",
    }
    rng = random.Random(1)

    def prompt(n: int) -> list[int]:
        return [rng.randrange(3, 4096) for _ in range(n)]

    with VLLMServer(
        tiny_model,
        kv_cache_bytes="2M",
        max_model_len=1024,
        env=env,
        scheduler_cls="ttlctl.engine.TTLScheduler",
        work_dir=tmp_path / "server",
        # scheduler settings the engine log states (neither binds here: no prompt is as long,
        # no queue as deep)
        extra_args=["--long-prefill-token-threshold", "1000", "--max-num-queued-reqs", "1000"],
    ) as server:
        a, s, u = prompt(390), prompt(390), prompt(390)
        assert complete(server, a, xargs={"program_id": "A", "tool": "bash"}) == 0
        assert complete(server, s, session="S") == 0
        assert complete(server, u) == 0
        for _ in range(12):  # twice the 2,048-token cache
            complete(server, prompt(350))
        assert complete(server, a + prompt(20), xargs={"program_id": "A", "is_last": 1}) >= 384
        assert complete(server, s + prompt(20), session="S") >= 384
        assert complete(server, u + prompt(20)) == 0
        text = server.get("/metrics").decode()
        assert metric(text, "ttlctl:pins_made_total") >= 2
        assert metric(text, "ttlctl:pins_hit_total") >= 2
        # the bundle's series, through the engine core's multiprocess files too
        assert metric(text, "ttlctl:bundle_active") == 1
        assert metric(text, "ttlctl:bundle_reloads_total") == 0
        assert metric(text, "ttlctl:bundle_refused_total") == 0
        assert metric(text, "ttlctl:pins_deferred_total") == 0  # no KV connector here
        server_log = server.log_path.read_text(errors="replace")
    loaded = re.search(r"TTLScheduler on vLLM (\S+),", server_log)
    assert loaded is not None and compat.supported(loaded.group(1)), server_log[-2000:]
    facts, *lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert facts["kind"] == "engine" and facts["replica"] == "replica-1"
    assert facts["bundle_sha256"] == json.loads(bundle.read_text())["sha256"]
    assert facts["max_model_len"] == 1024 and facts["block_size"] == 32
    # as the server's own command line set them (ttlctl.engine.facts.configured)
    assert (facts["long_prefill_token_threshold"], facts["max_num_queued_reqs"]) == (1000, 1000)
    assert facts["scheduling_policy"] == "fcfs" and facts["scheduler_reserve_full_isl"] is True
    assert facts["kv_connector"] is None and facts["enable_chunked_prefill"] is True
    assert len(lines) == 18 and all("kind" not in x for x in lines)
    assert {x["program_id"] for x in lines} == {"A", "S", None}
    last_a = [x for x in lines if x["program_id"] == "A"][-1]
    assert last_a["is_last"] is True and last_a["cached_tokens"] >= 384 and last_a["ttl_s"] == 0.0
