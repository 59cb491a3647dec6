"""ttlctl/server/prom.py: a server's /metrics (Prometheus text)."""

from __future__ import annotations

from ttlctl.server import prom


def test_parse_metrics_sums_label_sets_and_skips_comments() -> None:
    text = (
        "# HELP vllm:prefix_cache_hits_total Hits\n"
        "# TYPE vllm:prefix_cache_hits_total counter\n"
        'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 96.0\n'
        'vllm:prefix_cache_hits_total{engine="1",model_name="m"} 4.0\n'
        "ttlctl:pins_made_total 3.0\n"
        "ttlctl:pinned_blocks 5\n"
        'vllm:cache_config_info{block_size="32",num_gpu_blocks="64"} 1.0\n'
        "weird NaN\n"
    )
    values = prom.parse_metrics(text)
    assert values["vllm:prefix_cache_hits_total"] == 100.0
    assert values["ttlctl:pins_made_total"] == 3.0 and "weird" not in values
    labels = prom.metric_labels(text, "vllm:cache_config_info")
    assert labels["num_gpu_blocks"] == "64"
    assert prom.int_label(labels, "block_size") == 32 and prom.int_label(labels, "x") is None
    assert prom.metric_labels(text, "vllm:absent") == {}
    c = prom.counters(values)
    assert c["prefix_cache_hits"] == 100.0 and c["pins_made"] == 3.0
    assert c["preemptions"] is None and c["pins_hit"] is None


def test_delta_is_none_where_either_side_lacks_the_counter() -> None:
    before = prom.counters({prom.QUERIES: 10.0, prom.HITS: 1.0})
    after = prom.counters({prom.QUERIES: 30.0, prom.HITS: 5.0, prom.PREEMPTIONS: 2.0})
    d = prom.delta(before, after)
    assert (d["prefix_cache_queries"], d["prefix_cache_hits"]) == (20.0, 4.0)
    assert d["preemptions"] is None and d["pins_made"] is None
