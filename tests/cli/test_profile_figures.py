"""A measured profile's figures group thousands as the rest of the command line does.
Regression: a slow CPU's decode printed `1429.3 µs/seq` (and a long prefill `12345.68 ms`)."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console

from profiles import shipped
from ttlctl.cli.render import profile_table


def test_a_slow_profile_groups_thousands() -> None:
    doc: Any = json.loads((shipped.DATA / "tiny-cpu.json").read_text())
    doc["decode"] |= {"per_seq_s": 1.4293e-3, "step_s": 1.23456, "per_kv_token_s": 1.5e-6}
    doc["reload"]["latency_s"] = 2.5e-3
    # measured on a machine a thousand times slower: its prefills take seconds
    doc["prefill"]["points"] = [[tokens, s * 1000] for tokens, s in doc["prefill"]["points"]]
    console = Console(record=True, width=400)
    profile_table(console, doc)
    text = console.export_text()
    line = text.splitlines()[-1]
    assert "+ 2,500 µs; decode step 1,234.56 ms + 1,429.3 µs/seq + 1,500.00 ns/KV token" in line
    # the table's milliseconds too
    longest = max(seconds for _, seconds in doc["prefill"]["points"])
    assert longest >= 1 and f"{longest * 1000:,.2f} ms" in text, text


def test_a_profile_that_prices_a_cached_prefix_says_how() -> None:
    doc: Any = json.loads((shipped.DATA / "tiny-cpu.json").read_text())
    console = Console(record=True, width=400)
    profile_table(console, doc)
    text = console.export_text()
    assert "found cached" not in text and "attention over" not in text  # not measured
    doc["prefill"] |= {"per_cached_token_s": 6.54e-6, "per_context_pair_s": 2.31e-8}
    console = Console(record=True, width=400)
    profile_table(console, doc)
    last = console.export_text().splitlines()[-1]
    assert last.startswith(
        "a prompt token found cached 6.54 µs; a new token's attention over one in KV 23.10 ns; KV "
    ), last


def test_a_measured_pair_cost_of_zero_is_shown() -> None:
    """A fit may put the attention over a cached prefix at 0 (NNLS): that prices every
    chunk on a context differently from a profile without the term (2q a pair), so it is
    said, as any measured value."""
    doc: Any = json.loads((shipped.DATA / "tiny-cpu.json").read_text())
    doc["prefill"]["per_context_pair_s"] = 0.0
    console = Console(record=True, width=400)
    profile_table(console, doc)
    last = console.export_text().splitlines()[-1]
    assert last.startswith("a new token's attention over one in KV 0.00 ns; KV "), last


def test_a_measured_wake_is_one_line_and_none_without_it() -> None:
    doc: Any = json.loads((shipped.DATA / "tiny-cpu.json").read_text())
    console = Console(record=True, width=400)
    profile_table(console, doc)
    assert "after idle" not in console.export_text()  # not measured: nothing said
    doc["wake"] = [[0.1, 0.0105], [1.0, 0.01574], [30.0, 0.0]]
    console = Console(record=True, width=400)
    profile_table(console, doc)
    last = console.export_text().splitlines()[-1]
    assert last == "after idle: 0.1 s +10.5 ms, 1 s +15.7 ms, 30 s +0.0 ms", last
