"""What a refit changes, as plain data: each tool's pauses and τ* under the served bundle
and the refitted one, and the replayed JCT of each (``ttlctl refit``'s report)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from fitting.fit_doc import ToolFit
from ttlctl import bundle as bundle_mod
from ttlctl import bundle_doc

#: the context lengths (tokens) of the τ* columns, as ``ttlctl bundle inspect`` shows them
CONTEXTS = (1_000, 8_000, 32_000, 128_000)
#: the policies of the replays, in the report's order
POLICIES = ("old", "new", "vllm")


def tool_changes(
    old: bundle_doc.Bundle,
    new: bundle_doc.Bundle,
    contexts: Sequence[int] = CONTEXTS,
    queue_delay_s: float = 0.0,
    chunk: int | None = None,
) -> list[dict[str, Any]]:
    """One row per tool of either fit (most samples in the new fit first), then the row of
    any other tool (``tool`` None: the all-tools CDF): the pause count, p50 and p90 and
    whether the policy trusts the tool's CDF, and τ* (s) at each context length with
    where it came from, under each bundle. A miss is priced as a prefill in steps of
    ``chunk``, the served engine's ``max_num_batched_tokens`` (what the engine does;
    None: the profile's budget) and T is ``queue_delay_s`` (0: a fresh engine's)."""
    policies = {
        "old": bundle_mod.policy_from(old, chunk),
        "new": bundle_mod.policy_from(new, chunk),
    }
    fits = {"old": old["fit"], "new": new["fit"]}
    names = set(fits["old"]["tools"]) | set(fits["new"]["tools"])

    def weight(name: str) -> tuple[int, int, str]:
        counts = [_n(fits[w]["tools"].get(name)) for w in ("new", "old")]
        return (-counts[0], -counts[1], name)

    rows = []
    for name in [*sorted(names, key=weight), None]:
        row: dict[str, Any] = {"tool": name}
        for which, fit in fits.items():
            entry = fit["tools"].get(name) if name is not None else fit.get("global")
            decisions = [
                policies[which].decide(name, c, offload=False, queue_delay_s=queue_delay_s)
                for c in contexts
            ]
            row[which] = {
                "n": _n(entry),
                "p50_s": entry.get("p50_s") if entry else None,
                "p90_s": entry.get("p90_s") if entry else None,
                "tau_s": [d.ttl_s for d in decisions],
                "tau_source": [d.source for d in decisions],
            }
        rows.append(row)
    return rows


def _n(entry: ToolFit | None) -> int:
    return entry["n"] if entry else 0


def jct_table(held: Mapping[str, Any]) -> dict[str, dict[str, float | None]]:
    """Mean JCT and p95 (s) over the held-back replays, for old, new and stock vLLM."""
    return {
        name: {"mean_s": held[f"{name}_jct_mean_s"], "p95_s": held[f"{name}_jct_p95_s"]}
        for name in POLICIES
    }
