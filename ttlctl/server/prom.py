"""A server's ``/metrics`` (Prometheus text): the series, their labels, counters and deltas.

vLLM exports its prefix-cache and preemption counters there; the TTL scheduler adds
``ttlctl:pins_*`` (through Prometheus multiprocess mode). A live run reads the
counters before and after (:func:`counters`, :func:`delta`) and samples the gauges
(:data:`GAUGES`) during it.
"""

from __future__ import annotations

import math
import re

from ttlctl.series import PIN_COUNTERS, PINNED_BLOCKS, pin_counter_total

#: the counters a run reports the change of
QUERIES = "vllm:prefix_cache_queries_total"
HITS = "vllm:prefix_cache_hits_total"
PREEMPTIONS = "vllm:num_preemptions_total"
#: gauges sampled during a run (the TTL scheduler's series: :mod:`ttlctl.series`)
KV_USAGE = "vllm:kv_cache_usage_perc"
WAITING = "vllm:num_requests_waiting"
GAUGES = (PINNED_BLOCKS, KV_USAGE, WAITING)
#: the series whose labels describe the KV cache (block size, blocks, bytes, tokens)
CACHE_INFO = "vllm:cache_config_info"
#: present on a server that runs the TTL scheduler
TTL_SERIES = pin_counter_total("made")

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text: each series name → the sum of its samples over all label sets."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        if math.isnan(value):
            continue
        out[m.group(1)] = out.get(m.group(1), 0.0) + value
    return out


def metric_labels(text: str, name: str) -> dict[str, str]:
    """The labels of the first sample of ``name`` (e.g. ``vllm:cache_config_info``)."""
    for line in text.splitlines():
        if line.startswith(name + "{"):
            body = line[len(name) + 1 : line.rfind("}")]
            return dict(_LABEL.findall(body))
    return {}


def int_label(labels: dict[str, str], key: str) -> int | None:
    """A positive integer label, or None."""
    try:
        value = int(float(labels[key]))
    except (KeyError, ValueError):
        return None
    return value if value > 0 else None


def counters(values: dict[str, float]) -> dict[str, float | None]:
    """The counters a run reports deltas of (None: the server does not have it)."""
    out: dict[str, float | None] = {
        "prefix_cache_queries": values.get(QUERIES),
        "prefix_cache_hits": values.get(HITS),
        "preemptions": values.get(PREEMPTIONS),
    }
    for name in PIN_COUNTERS:
        out[f"pins_{name}"] = values.get(pin_counter_total(name))
    return out


def delta(
    before: dict[str, float | None], after: dict[str, float | None]
) -> dict[str, float | None]:
    """``after − before`` per counter (None where either side lacks it)."""
    out: dict[str, float | None] = {}
    for key, b in before.items():
        a = after.get(key)
        out[key] = None if a is None or b is None else a - b
    return out
