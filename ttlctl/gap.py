"""The gap closed: the share of the mean-JCT gap from stock vLLM to unlimited KV that a
policy closes, the one rule the replay, the command line and the HTML report follow.

The share divides by the gap, so it means something only where the gap does: unlimited
KV must be faster than vLLM by at least :data:`MIN_GAP` of vLLM's mean JCT. Below that,
memory is not what limits the load, and the share would be noise, or, with unlimited KV
the slower (a fleet, or a load that a policy's queue order helps more than memory), of
the wrong sign: there is none. Nothing is imported, so the command line and the HTML
report (which must not import each other or the simulator) both read it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: the least gap, as a share of vLLM's mean JCT, that a share is taken of
MIN_GAP = 0.01

#: what a table or page says where both bounds ran and there is no gap to share
NO_GAP = (
    f"no gap closed: unlimited KV is not {MIN_GAP:.0%} faster than vLLM on this load, so "
    "memory is not what limits it (a policy that orders the queue may still beat both)"
)


def closed(vllm_s: float | None, unlimited_s: float | None, policy_s: float | None) -> float | None:
    """The share of the gap from ``vllm_s`` to ``unlimited_s`` (mean JCTs) that a policy of
    mean JCT ``policy_s`` closes: 0 is vLLM, 1 unlimited KV, below 0 worse than vLLM.
    None: a figure is missing, or the gap is under :data:`MIN_GAP`."""
    if vllm_s is None or unlimited_s is None or policy_s is None:
        return None
    gap = vllm_s - unlimited_s
    if not (gap > 0 and gap >= MIN_GAP * vllm_s):  # NaN fails both
        return None
    return (vllm_s - policy_s) / gap


def no_gap(results: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a replay's results ran both bounds and found no gap to share (each carries
    ``gap_closed``, and none has one)."""
    return bool(results) and all("gap_closed" in r and r["gap_closed"] is None for r in results)
