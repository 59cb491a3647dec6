"""The fleet a command asked for: ``--replicas``, ``--router`` and the router's flags,
checked and made into a :class:`~replay.fleet.run.FleetSpec` (None: one engine).

A router or its flags without ``--replicas`` are refused by the flag given
(:func:`needs_replicas`), before the flags are checked against the router.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from replay.fleet.routers import AS_LOGGED, RouterSettings, replica_order, router_name
from replay.fleet.routers.consistent_hash import default_urls
from replay.fleet.run import FleetSpec, check_replicas, logged_replicas
from ttlctl.bundle import tuned_prefix_credit
from ttlctl.errors import ConfigError
from ttlctl.nouns import counted
from ttlctl.router_doc import KV_AWARE


def router_settings(
    name: str | None,
    *,
    replicas: int | None,
    cache_threshold: float | None = None,
    balance_abs_threshold: int | None = None,
    balance_rel_threshold: float | None = None,
    kv_aware_session_affinity_ttl_secs: int | None = None,
    router_temperature: float | None = None,
    pin_queue_bound: int | None = None,
    program_scheduling_config_json: str | None = None,
    program_scheduling_calibration: str | None = None,
    trace: Path | None = None,
) -> RouterSettings | None:
    """The router asked for on the command line (None: none named, no router flag given;
    router flags without ``--router``: vllm-router's default, ``cache-aware``). A router or
    its flags without ``--replicas`` are refused before the flags are checked against the
    router, so that the message names what is missing (:func:`needs_replicas`)."""
    flags = {
        "cache_threshold": cache_threshold,
        "balance_abs_threshold": balance_abs_threshold,
        "balance_rel_threshold": balance_rel_threshold,
        "kv_aware_session_affinity_ttl_secs": kv_aware_session_affinity_ttl_secs,
        "router_temperature": router_temperature,
        "pin_queue_bound": pin_queue_bound,
        "program_scheduling_config_json": program_scheduling_config_json,
        "program_scheduling_calibration": program_scheduling_calibration,
    }
    if name is None and all(v is None for v in flags.values()):
        return None
    if replicas is None:
        given = [k for k, v in flags.items() if v is not None]
        raise needs_replicas(name, given[0] if given else None, trace)
    # an empty --router is a name the router refuses, not the default
    return RouterSettings("cache-aware" if name is None else name, **flags)  # type: ignore[arg-type]


def needs_replicas(router: str | None, setting: str | None, trace: Path | None) -> ConfigError:
    """The one-line error for a router (``--router NAME``) or a router setting (a
    :class:`RouterSettings` field name) given without ``--replicas``: it names the flag
    given, and for ``as-logged`` how many replicas the trace names (``--replicas K``)."""
    if router == AS_LOGGED and trace is not None:
        k = len(replica_order(logged_replicas(trace).values()))
        return ConfigError(
            f"--router as-logged: the trace's replica column names {counted(k, 'replica')}; "
            f"give --replicas {k}"
        )
    if router is not None:
        return ConfigError(f"--router {router} needs --replicas N")
    flag = "--" + (setting or "router").replace("_", "-")
    return ConfigError(f"{flag} is a router setting: it needs --replicas N")


def fleet_for(
    trace: Path,
    replicas: int | None,
    router: RouterSettings | None,
    *,
    backend: str = "fast",
    live: bool = False,
    async_scheduling: bool = False,
    worker_urls: tuple[str, ...] | None = None,
    prefix_credit: bool = True,
    searched: Sequence[str] = (),
) -> FleetSpec | None:
    """The fleet a command was asked for (None: one engine, no router), checked.
    ``searched``: the routers a study chooses among (empty: ``router`` alone), which
    ``prefix_credit`` off needs ``kv-aware`` among."""
    if replicas is None:
        if router is not None:
            raise needs_replicas(router.name, None, trace)
        if worker_urls is not None:
            raise ConfigError("--worker-urls needs --replicas N")
        if not prefix_credit:
            raise ConfigError(f"{NO_PREFIX_CREDIT} needs --replicas N")
        return None
    check_replicas(replicas)
    if live:
        raise ConfigError(
            "--replicas with --live is not supported: start the servers and the router, "
            "and point --live at the router"
        )
    router = router or RouterSettings()
    if not prefix_credit:
        names = dict.fromkeys(router_name(r) for r in searched)  # in order, each once
        check_credited_router(list(names) or [router.name])
    logged = logged_replicas(trace) if router.name == AS_LOGGED else None
    return FleetSpec(
        replicas,
        router,
        logged,
        backend=backend,
        async_scheduling=async_scheduling,
        worker_urls=worker_urls,
        prefix_credit=prefix_credit,
    )


#: the flag that turns the simulated ``kv-aware``'s prefix credit off
NO_PREFIX_CREDIT = "--no-prefix-credit"


def check_credited_router(names: Sequence[str]) -> None:
    """``--no-prefix-credit`` refused (one line) unless ``kv-aware`` is among the routers
    ``names``: no other router's placement depends on the request's body."""
    if KV_AWARE in names:
        return
    which = (
        f"the {names[0]} router does not take it"
        if len(names) == 1
        else f"none of the routers searched ({', '.join(names)}) takes it"
    )
    raise ConfigError(
        f"{NO_PREFIX_CREDIT}: {which} (only {KV_AWARE} places a request by whether it "
        f"credits its cached prefix); give --router {KV_AWARE}"
    )


def credit_note(routers: Sequence[RouterSettings], fleet: FleetSpec) -> str | None:
    """The line saying that ``kv-aware`` is simulated crediting every call with its cached
    prefix, which vllm-router does only for some clients' requests, and how to model the
    others (None: credit off, one replica (nowhere else to go), or no ``kv-aware`` among
    ``routers``)."""
    if not fleet.prefix_credit or fleet.replicas < 2 or all(r.name != KV_AWARE for r in routers):
        return None
    return (
        f"--router {KV_AWARE}: every call is credited with the prefix its replica caches, as "
        "vllm-router credits chat requests to replicas run with --enable-scale-out and "
        "/v1/completions bodies it models; give --no-prefix-credit for clients it does not "
        "credit (completions with vllm_xargs, chat without --enable-scale-out)"
    )


def default_urls_note(
    routers: Sequence[RouterSettings], replicas: int, worker_urls: Sequence[str] | None
) -> str | None:
    """The line saying that a router among ``routers`` places programs by hashing the
    default worker URLs (``http://replica-0``, …) for want of ``--worker-urls``: where a
    program lands then is where it would on a fleet of those URLs, not necessarily on the
    real one. None: the URLs are given, one replica (nowhere else to go), or no router
    that hashes them."""
    if worker_urls is not None or replicas < 2:
        return None
    hashing = list(dict.fromkeys(r.name for r in routers if r.hashes_urls()))
    if not hashing:
        return None
    urls = default_urls(replicas)
    shown = f"{urls[0]}, {urls[1]}" if replicas == 2 else f"{urls[0]} … {urls[-1]}"
    return (
        f"--router {', '.join(hashing)}: the placement hashes the default worker URLs "
        f"{shown}; --worker-urls (the replicas' URLs as vllm-router is given them) places "
        "programs as the real fleet's router does"
    )


def tuned_elsewhere(bundle: Mapping[str, Any], fleet: FleetSpec | None) -> str | None:
    """What to say when the bundle was tuned for a fleet other than the one this replay
    runs (None: one engine): another router, other settings of it, another replica count;
    None when it was not, or names none. Behind the same router, the settings that differ
    are named, each with both values; behind another, both routers with their settings
    (past :data:`SETTINGS_SHOWN` characters, those off the router's defaults). Behind
    ``kv-aware``, whether the study credited the calls with their cached prefix
    (``--no-prefix-credit``, recorded with the tuning) counts as one of the settings."""
    tuned = bundle.get("router")
    if not isinstance(tuned, Mapping):
        return None
    # a read bundle's section has an integer count >= 1 (bundle verify); its name in either
    # spelling (kv_aware is kv-aware)
    name, replicas = router_name(str(tuned.get("name"))), int(tuned.get("replicas", 1))
    credit = tuned_prefix_credit(bundle) if name == KV_AWARE else None
    uncredited = f" {NO_PREFIX_CREDIT}" if credit is False else ""
    if fleet is None:
        return (
            f"tuned for {counted(replicas, 'replica')} behind {_router_words(tuned)}, "
            f"replayed on one engine: give --replicas {replicas} --router {name}{uncredited} "
            "and its settings to replay it as tuned"
        )
    asked = fleet.describe()
    mine = _resolved(tuned)
    theirs = dict(asked["settings"])
    if credit is not None and name == asked["name"]:
        mine["prefix_credit"], theirs["prefix_credit"] = credit, fleet.prefix_credit
    other_count = replicas != fleet.replicas
    tuned_count = f" on {replicas}" if other_count else ""
    now_count = f" on {fleet.replicas}" if other_count else ""
    give = (
        f"give {f'--replicas {replicas} ' if other_count else ''}--router {name}{uncredited} "
        "and its settings to replay it as tuned"
    )
    if name == asked["name"] and mine == theirs:
        if not other_count:
            return None
        return (
            f"tuned on {counted(replicas, 'replica')}, replayed on {fleet.replicas}: "
            f"give --replicas {replicas} to replay it as tuned"
        )
    if name == asked["name"]:
        keys = [k for k in dict.fromkeys([*mine, *theirs]) if mine.get(k) != theirs.get(k)]
        was = ", ".join(f"{k} {_value(mine.get(k))}" for k in keys)
        now = ", ".join(f"{k} {_value(theirs.get(k))}" for k in keys)
        return (
            f"tuned behind {name} with {was}{tuned_count}, replayed with {now}{now_count}: {give}"
        )
    return (
        f"tuned behind {_router_words(tuned)}{tuned_count}, replayed behind {_router_words(asked)}"
        f"{now_count}: {give}"
    )


def _resolved(router: Mapping[str, Any]) -> dict[str, Any]:
    """A router section's settings with the router's defaults filled in, as a replay's are
    described (a section that leaves one out means the default); as written when they do
    not make a router (a hand-edited section: compared as they are)."""
    try:
        return RouterSettings.from_section(router).resolved()
    except ConfigError:
        return dict(router.get("settings") or {})


def _value(value: Any) -> str:
    """A setting as a note writes it: ``off`` for none (the router's own default, as the
    fleet table says), ``true``/``false``, numbers and text as they are."""
    if value is None:
        return "off"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _router_words(router: Mapping[str, Any]) -> str:
    """A router and its settings, as a note names them: ``kv-aware (… 42, …)``; past
    :data:`SETTINGS_SHOWN` characters, only those off the router's defaults."""
    settings = dict(router.get("settings") or {})
    words = ", ".join(f"{k} {_value(v)}" for k, v in settings.items())
    if len(words) > SETTINGS_SHOWN:  # Program scheduling's config: hundreds of characters
        try:
            defaults = RouterSettings(str(router.get("name"))).resolved()
        except ConfigError:  # a name no router model has: nothing to tell apart
            defaults = {}
        changed = {k: v for k, v in settings.items() if k not in defaults or defaults[k] != v}
        words = ", ".join(
            [f"{k} {_value(v)}" for k, v in changed.items()]
            + [f"{'the rest' if changed else 'all'} at the router's defaults"]
        )
    return str(router.get("name")) + (f" ({words})" if words else "")


#: the characters of a router's settings a note shows whole
SETTINGS_SHOWN = 160
