"""A live run as vLLM's benchmark result JSON (``vllm bench serve --save-result``).

The figures vLLM's tools read (throughputs, ``{mean,median,std,p50,p90,p95,p99}`` of
TTFT, TPOT, ITL and end-to-end latency in milliseconds, the per-request lists), with
ttlctl's own result under ``"ttlctl"``; the file named as vLLM names it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from replay.live.records import LiveCallRecord
from replay.policy_runs import Load
from ttlctl.errors import ConfigError
from ttlctl.server.facts import ServerInfo


def check_result_flags(save_result: bool, result_dir: Path | None, label: str | None) -> None:
    """``--result-dir`` and ``--label`` name ``--save-result``'s files: refused without
    it (``vllm bench serve`` writes nothing then and says nothing; here, one line)."""
    for flag, given in (("--result-dir", result_dir is not None), ("--label", label is not None)):
        if given and not save_result:
            raise ConfigError(f"{flag} needs --save-result")


def _stats_ms(values: Sequence[float], name: str) -> dict[str, float | None]:
    """vLLM's ``{mean,median,std,p50,p90,p95,p99}_<name>_ms`` (0 when empty, as vLLM does)."""
    arr = np.asarray(values if values else [0.0], dtype=float) * 1000.0
    out: dict[str, float | None] = {
        f"mean_{name}_ms": float(arr.mean()),
        f"median_{name}_ms": float(np.median(arr)),
        f"std_{name}_ms": float(arr.std()),
    }
    for p in (50, 90, 95, 99):
        out[f"p{p}_{name}_ms"] = float(np.percentile(arr, p))
    return out


def benchmark_result(
    result: dict[str, Any], records: Sequence[LiveCallRecord], info: ServerInfo, label: str
) -> dict[str, Any]:
    """vLLM's benchmark result JSON (``vllm bench serve --save-result``); ours under ``ttlctl``."""
    ok = [r for r in records if r.ok]
    starts = [r.start_s for r in records]
    ends = [r.end_s for r in ok if r.end_s is not None]
    duration = (max(ends) - min(starts)) if starts and ends else 0.0
    total_in = sum(r.prompt_tokens for r in ok)
    total_out = sum(r.output_tokens for r in ok)
    itls = [g for r in ok for g in r.itl_s]
    doc: dict[str, Any] = {
        "date": datetime.now().strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": "openai",
        "backend": "openai",
        "label": label,
        "model_id": info.model,
        "tokenizer_id": info.model,
        "num_prompts": len(records),
        "request_rate": result.get("config", {}).get("jps") or "inf",
        "burstiness": 1.0,
        "max_concurrency": result.get("config", {}).get("concurrency"),
        "duration": duration,
        "completed": len(ok),
        "failed": len(records) - len(ok),
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "request_throughput": len(ok) / duration if duration > 0 else 0.0,
        "request_goodput": None,
        "output_throughput": total_out / duration if duration > 0 else 0.0,
        "total_token_throughput": (total_in + total_out) / duration if duration > 0 else 0.0,
    }
    doc.update(_stats_ms([r.ttft_s for r in ok if r.ttft_s is not None], "ttft"))
    doc.update(_stats_ms([r.tpot_s for r in ok if r.tpot_s is not None], "tpot"))
    doc.update(_stats_ms(itls, "itl"))
    doc.update(_stats_ms([r.e2el_s for r in ok if r.e2el_s is not None], "e2el"))
    doc["input_lens"] = [r.prompt_tokens for r in records]
    doc["output_lens"] = [r.output_tokens for r in records]
    # 0.0 where a call has none (no first token; failed), as vLLM's RequestFuncOutput
    # leaves them: its readers sum and plot these lists as numbers
    doc["ttfts"] = [r.ttft_s if r.ttft_s is not None else 0.0 for r in records]
    doc["latencies"] = [r.e2el_s if r.e2el_s is not None else 0.0 for r in records]
    doc["errors"] = [r.error or "" for r in records]
    doc["ttlctl"] = {k: v for k, v in result.items() if k not in ("files", "pinned_timeline")}
    return doc


def result_name(doc: dict[str, Any], timing: Load) -> str:
    """vLLM's file name: ``{label}-{rate}qps[-concurrencyN]-{model}-{date}.json``."""
    rate = f"{timing.jps:g}jps" if timing.jps is not None else "trace"
    conc = f"-concurrency{timing.concurrency}" if timing.concurrency is not None else ""
    model = str(doc["model_id"]).rstrip("/").split("/")[-1]
    return f"{doc['label']}-{rate}{conc}-{model}-{doc['date']}.json"
