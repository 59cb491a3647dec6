"""A fleet's result as the replay JSON gives it, with only what the fleet tables read
(shared by the CLI's table tests)."""

from __future__ import annotations

from typing import Any

from ttlctl.cli.render.fleet_view import MISS_LABELS


def fleet_result(
    policy: str,
    per_replica: list[dict[str, Any]],
    router: str = "sticky-least-loaded",
    settings: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``per_replica`` (each given its index, a 50% hit rate and no preemption) behind
    ``router`` with ``settings``; balanced, every call returned, no pin."""
    for i, rep in enumerate(per_replica):
        rep.update(replica=i, prefix_hit_rate=0.5, preemptions=0)
    return {
        "policy": policy,
        "router": {"name": router, "replicas": len(per_replica), "settings": settings or {}},
        "load_balance": 1.0,
        "returned_share": 1.0,
        "pins": {"made": 0},
        "pins_wasted": 0,
        "pins_wasted_share": None,
        "miss_reasons": dict.fromkeys(MISS_LABELS, 0),
        "per_replica": per_replica,
    }
