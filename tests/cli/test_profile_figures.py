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


def test_a_profile_that_prices_cached_prompt_tokens_says_so() -> None:
    doc: Any = json.loads((shipped.DATA / "tiny-cpu.json").read_text())
    console = Console(record=True, width=400)
    profile_table(console, doc)
    assert "found cached" not in console.export_text()  # not measured: nothing said
    doc["prefill"]["per_cached_token_s"] = 6.54e-6
    console = Console(record=True, width=400)
    profile_table(console, doc)
    assert (
        console.export_text()
        .splitlines()[-1]
        .startswith("a prompt token found cached 6.54 µs; KV ")
    )
