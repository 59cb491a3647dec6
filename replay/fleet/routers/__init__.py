"""Router models by name, their settings (vllm-router's flag names and defaults), and
which settings each one takes.

The decision rules were read from vllm-project/router's source (``src/policies/*.rs``); the
policy names, flag names and defaults from the vllm-router 0.1.17 wheel
(``vllm_router/router_args.py``). Each module names the file it follows and its deliberate
differences."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from profiles.router_calibration import RouterCalibration
from replay.fleet.routers.as_logged import AsLogged, replica_order
from replay.fleet.routers.base import FleetView, RoutedCall, Router
from replay.fleet.routers.cache_aware import CacheAware
from replay.fleet.routers.consistent_hash import ConsistentHash
from replay.fleet.routers.kv_aware import KvAware
from replay.fleet.routers.pin_aware import DEFAULT_PIN_QUEUE_BOUND, PinAware
from replay.fleet.routers.power_of_two import PowerOfTwo
from replay.fleet.routers.program_scheduling import ProgramScheduling
from replay.fleet.routers.progress_ttl import (
    CALIBRATIONS,
    ProgramSchedulingConfig,
    calibration_of,
)
from replay.fleet.routers.random_pick import RandomPick
from replay.fleet.routers.round_robin import RoundRobin
from replay.fleet.routers.sticky_least_loaded import StickyLeastLoaded
from ttlctl.errors import ConfigError
from ttlctl.router_doc import ttlctl_name

__all__ = [
    "AS_LOGGED",
    "FLAGS",
    "ROUTERS",
    "FleetView",
    "RoutedCall",
    "Router",
    "RouterSettings",
    "make_router",
    "replica_order",
    "router_name",
]

#: not a router but the placement a trace's ``replica`` column recorded
AS_LOGGED = "as-logged"
#: ttlctl's names (vllm-router's with dashes), in the comparison table's order
ROUTERS = (
    "round-robin",
    "random",
    "power-of-two",
    "consistent-hash",
    "cache-aware",
    "kv-aware",
    "sticky-least-loaded",
    "pin-aware",
    "program-scheduling",
    "as-logged",
)


#: ttlctl's name of a router given in vLLM's router's spelling (``cache_aware``,
#: ``round_robin``, …) or in ttlctl's own: the bundle's reader's rule, one for both
router_name = ttlctl_name


#: a setting's value (Program scheduling's config has strings and booleans too)
Setting = float | int | str | None

#: setting -> its command-line flag (vllm-router's, except pin-aware's own)
FLAGS = {
    "cache_threshold": "--cache-threshold",
    "balance_abs_threshold": "--balance-abs-threshold",
    "balance_rel_threshold": "--balance-rel-threshold",
    "kv_aware_session_affinity_ttl_secs": "--kv-aware-session-affinity-ttl-secs",
    "router_temperature": "--router-temperature",
    "pin_queue_bound": "--pin-queue-bound",
    "program_scheduling_config_json": "--program-scheduling-config-json",
    "program_scheduling_calibration": "--program-scheduling-calibration",
}

#: the settings each router takes
TAKES: dict[str, tuple[str, ...]] = {
    "cache-aware": ("cache_threshold", "balance_abs_threshold", "balance_rel_threshold"),
    "kv-aware": ("kv_aware_session_affinity_ttl_secs", "router_temperature"),
    "pin-aware": ("pin_queue_bound",),
    "program-scheduling": ("program_scheduling_config_json", "program_scheduling_calibration"),
}


@dataclass(frozen=True, slots=True)
class RouterSettings:
    """A router and its settings; unset (None) settings take the real router's default."""

    name: str = "cache-aware"
    cache_threshold: float | None = None
    balance_abs_threshold: int | None = None
    balance_rel_threshold: float | None = None
    kv_aware_session_affinity_ttl_secs: float | None = None
    router_temperature: float | None = None
    pin_queue_bound: int | None = None
    #: vllm-router's ``--program-scheduling-config-json`` (its calibration objects, when
    #: given, override ``program_scheduling_calibration``'s)
    program_scheduling_config_json: str | None = None
    #: ttlctl's: the calibration the router runs on, ``profile`` (the replay's profile,
    #: as ``ttlctl profile --as vllm-router`` prints it; the default) or ``reference``
    #: (the router's built-in coefficients, as with no calibration given)
    program_scheduling_calibration: str | None = None

    def __post_init__(self) -> None:
        # vllm-router's own spellings (cache_aware, round_robin, …) name the same routers
        object.__setattr__(self, "name", router_name(self.name))
        if self.name not in ROUTERS:
            raise ConfigError(
                f"--router: unknown router {self.name!r}; choose from {', '.join(ROUTERS)}"
            )
        takes = TAKES.get(self.name, ())
        for f in fields(self):
            if f.name != "name" and getattr(self, f.name) is not None and f.name not in takes:
                raise ConfigError(
                    f"{FLAGS[f.name]}: the {self.name} router does not take it"
                    + (f" (it takes {', '.join(FLAGS[t] for t in takes)})" if takes else "")
                )
        if self.cache_threshold is not None and not 0 <= self.cache_threshold <= 1:
            raise ConfigError("--cache-threshold must be in [0, 1]")
        if self.balance_abs_threshold is not None and self.balance_abs_threshold < 0:
            raise ConfigError("--balance-abs-threshold must be ≥ 0")
        if self.balance_rel_threshold is not None and self.balance_rel_threshold < 0:
            raise ConfigError("--balance-rel-threshold must be ≥ 0")
        ttl = self.kv_aware_session_affinity_ttl_secs
        if ttl is not None and not 1 <= ttl <= 31_536_000:
            raise ConfigError("--kv-aware-session-affinity-ttl-secs must be in 1..31536000")
        if self.router_temperature is not None and self.router_temperature < 0:
            raise ConfigError("--router-temperature must be ≥ 0")
        if self.pin_queue_bound is not None and self.pin_queue_bound < 0:
            raise ConfigError("--pin-queue-bound must be ≥ 0")
        if self.program_scheduling_config_json is not None:
            ProgramSchedulingConfig.from_json(self.program_scheduling_config_json)
        cal = self.program_scheduling_calibration
        if cal is not None and cal not in CALIBRATIONS:
            raise ConfigError(
                f"--program-scheduling-calibration takes {' or '.join(CALIBRATIONS)}, not {cal!r}"
            )

    def program_scheduling(self) -> tuple[ProgramSchedulingConfig, dict[str, Any]]:
        """Program scheduling's config (defaults filled) and the calibration objects given
        in its JSON."""
        return ProgramSchedulingConfig.from_json(self.program_scheduling_config_json or "{}")

    def resolved(self) -> dict[str, Setting]:
        """The settings this router takes, with the real router's defaults filled in
        (Program scheduling: its config's fields, and ``calibration``)."""
        if self.name == "program-scheduling":
            cfg, given = self.program_scheduling()
            return {
                **cfg.to_json(),
                **{f"{k}.{f}": v for k, obj in given.items() for f, v in obj.items()},
                "calibration": self.program_scheduling_calibration or "profile",
            }
        defaults: dict[str, float | int | None] = {
            "cache_threshold": 0.3,
            "balance_abs_threshold": 64,
            "balance_rel_threshold": 1.5,
            "kv_aware_session_affinity_ttl_secs": None,
            "router_temperature": 0.0,
            "pin_queue_bound": DEFAULT_PIN_QUEUE_BOUND,
        }
        out: dict[str, Setting] = {}
        for key in TAKES.get(self.name, ()):
            value = getattr(self, key)
            out[key] = defaults[key] if value is None else value
        return out


def make_router(
    settings: RouterSettings,
    replicas: int,
    *,
    seed: int,
    block_size: int,
    logged_replicas: Sequence[str] = (),
    calibration: RouterCalibration | None = None,
    worker_urls: Sequence[str] | None = None,
) -> Router:
    """A fresh router (no state survives between replays). ``calibration``: the replay's
    profile as Program scheduling's calibration (None: the router's reference one).
    ``worker_urls``: the replicas' URLs as the real router is given them, in replica
    order; the routers that hash them (``consistent-hash``, ``sticky-least-loaded``,
    Program scheduling's ``consistent_hash`` binding) then place sessions as it does
    (None: :func:`~replay.fleet.routers.consistent_hash.default_urls`)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xF1EE7]))
    s = settings.resolved()
    name = settings.name
    if name == "round-robin":
        return RoundRobin()
    if name == "random":
        return RandomPick(rng)
    if name == "power-of-two":
        return PowerOfTwo(rng)
    if name == "consistent-hash":
        return ConsistentHash(replicas, worker_urls)
    if name == "cache-aware":
        return CacheAware(
            cache_threshold=float(s["cache_threshold"] or 0.0),
            balance_abs_threshold=int(s["balance_abs_threshold"] or 0),
            balance_rel_threshold=float(s["balance_rel_threshold"] or 0.0),
        )
    if name == "kv-aware":
        ttl = s["kv_aware_session_affinity_ttl_secs"]
        return KvAware(
            rng,
            block_size=block_size,
            router_temperature=float(s["router_temperature"] or 0.0),
            kv_aware_session_affinity_ttl_secs=None if ttl is None else float(ttl),
        )
    if name == "sticky-least-loaded":
        return StickyLeastLoaded(urls=worker_urls)
    if name == "pin-aware":
        return PinAware(pin_queue_bound=int(s["pin_queue_bound"] or 0))
    if name == "program-scheduling":
        cfg, given = settings.program_scheduling()
        prefill, decode = calibration_of(given, calibration)
        return ProgramScheduling(cfg, prefill, decode, replicas, worker_urls)
    return AsLogged(logged_replicas, replicas)
