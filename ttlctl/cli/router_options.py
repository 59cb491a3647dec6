"""The options of vLLM's router (vllm-router) and of a fleet behind one, declared once:
``profile --as vllm-router``, ``validate --replicas N --router R`` (live), and ``replay``
and ``tune --replicas N`` (simulated: the router, its settings, the replicas' URLs).

A router setting's flag is vllm-router's, and its help states the default from
``ttlctl.router_doc``'s table (one table for the routers' names, ranges and defaults). The
options every command shares: :mod:`ttlctl.cli.options`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from ttlctl.cli.options import PROFILE_HELP
from ttlctl.router_doc import default_of, number_text

# ---- vLLM's router (vllm-router) ------------------------------------------------------

ProfileToShow = Annotated[str | None, typer.Option("--profile", help=PROFILE_HELP)]
AsRouter = Annotated[
    str | None,
    typer.Option(
        "--as",
        help="vllm-router: print the profile as the router's --program-scheduling-config-json "
        "value (its Program scheduling calibrated; each coefficient explained on stderr).",
    ),
]
DecodeThroughputAlpha = Annotated[
    float | None,
    typer.Option(
        "--decode-throughput-alpha",
        help="With --as vllm-router: the router's prefill_cost_model.decode_throughput_alpha "
        "(share of decode throughput kept during a prefill; default 0, ttlctl's additive step).",
    ),
]
Replicas = Annotated[
    int | None,
    typer.Option(
        "--replicas",
        help="A fleet: this many vLLM replicas with vllm-router in front (see --router).",
    ),
]
Routers = Annotated[
    list[str] | None,
    typer.Option(
        "--router",
        help="vllm-router's --policy for the fleet: cache_aware (its default), round_robin, "
        "random, power_of_two, consistent_hash, sticky_least_loaded, kv_aware; or "
        "program_scheduling (its Program scheduling over consistent_hash, calibrated by "
        "--profile when given); or bundle (the router --bundle was tuned behind, with its "
        "settings: the flags `ttlctl bundle query --as vllm-router` prints). Repeat for "
        "several.",
    ),
]

# ---- a fleet behind a router, simulated (replay --replicas, tune --replicas) -----------

FleetReplicas = Annotated[
    int | None,
    typer.Option(
        "--replicas",
        help="Replay N engines behind a router, in one event loop (each engine sized by "
        "the engine flags, as vLLM's flags size each server; --concurrency is the fleet's; "
        "with --backend vllm each engine is vLLM's own scheduler).",
    ),
]
WorkerUrls = Annotated[
    list[str] | None,
    typer.Option(
        "--worker-urls",
        help="With --replicas: each replica's URL as vllm-router is given it (repeat it, one "
        "per replica, in order); consistent-hash, sticky-least-loaded and Program "
        "scheduling then place each program where that router would (default: "
        "http://replica-0, http://replica-1, …).",
    ),
]
RouterName = Annotated[
    list[str] | None,
    typer.Option(
        "--router",
        help="With --replicas (once): round-robin, random, power-of-two, consistent-hash, "
        "cache-aware (the default with --replicas, as vllm-router's), kv-aware, "
        "sticky-least-loaded (vllm-router's policies; its spellings with underscores too), "
        "program-scheduling (vllm-router's --enable-program-scheduling), pin-aware "
        "(ttlctl's), as-logged (the trace's replica column).",
    ),
]


def _router_default(router: str, key: str) -> str:
    """A router setting's default as its help says it (``ttlctl.router_doc``'s table)."""
    return number_text(default_of(router, key))


CacheThreshold = Annotated[
    float | None,
    typer.Option(
        "--cache-threshold",
        help="cache-aware: prefix match rate above which a request follows its match "
        f"(vllm-router's flag; {_router_default('cache-aware', 'cache_threshold')}).",
    ),
]
BalanceAbsThreshold = Annotated[
    int | None,
    typer.Option(
        "--balance-abs-threshold",
        help="cache-aware: balance load when max − min in-flight requests exceeds this "
        "and --balance-rel-threshold holds (vllm-router's flag; "
        f"{_router_default('cache-aware', 'balance_abs_threshold')}).",
    ),
]
BalanceRelThreshold = Annotated[
    float | None,
    typer.Option(
        "--balance-rel-threshold",
        help="cache-aware: ... and max > min × this (vllm-router's flag; "
        f"{_router_default('cache-aware', 'balance_rel_threshold')}).",
    ),
]
KvAwareSessionAffinityTtlSecs = Annotated[
    int | None,
    typer.Option(
        "--kv-aware-session-affinity-ttl-secs",
        help="kv-aware: keep a session on its replica while idle at most this long "
        "(vllm-router's flag; off by default).",
    ),
]
RouterTemperature = Annotated[
    float | None,
    typer.Option(
        "--router-temperature",
        help="kv-aware: softmax temperature over the costs; 0 takes the lowest "
        f"(vllm-router's flag; {_router_default('kv-aware', 'router_temperature')}).",
    ),
]
PinQueueBound = Annotated[
    int | None,
    typer.Option(
        "--pin-queue-bound",
        help="pin-aware: leave the pin's replica when it has more than this many requests "
        "in flight beyond the least loaded one's (ttlctl's router; "
        f"{_router_default('pin-aware', 'pin_queue_bound')}).",
    ),
]
ProgramSchedulingConfigJson = Annotated[
    str | None,
    typer.Option(
        "--program-scheduling-config-json",
        help="program-scheduling: vllm-router's Program-scheduling config, as its flag of "
        "that name takes it (JSON; unset fields take the router's defaults).",
    ),
]
ProgramSchedulingCalibration = Annotated[
    str | None,
    typer.Option(
        "--program-scheduling-calibration",
        help="program-scheduling: the router's cost coefficients: profile (the replay's "
        "--profile, as `ttlctl profile --as vllm-router` prints them; the default) or "
        "reference (the router's built-in ones).",
    ),
]
NoPrefixCredit = Annotated[
    bool,
    typer.Option(
        "--no-prefix-credit",
        help="kv-aware: the clients send requests that vllm-router's kv_aware does not "
        "credit with their cached prefix (a /v1/completions body with a field it does not "
        "model, vllm_xargs among them; a chat request to replicas without vLLM's "
        "--enable-scale-out): it places them by prompt size and load alone. Default: every "
        "call is credited.",
    ),
]
RouterNames = Annotated[
    list[str] | None,
    typer.Option(
        "--router",
        help="With --replicas: the router the fleet runs behind (default cache-aware, "
        "vllm-router's default); repeat it to search the router too. Its settings that "
        "matter for retention are searched with η, K and the valve.",
    ),
]
