"""Router models by name, their settings (vllm-router's flag names and defaults), and
which settings each one takes.

The decision rules were read from vllm-project/router's source (``src/policies/*.rs``); the
policy names, flag names, types, ranges and defaults from the vllm-router 0.1.17 wheel
(``vllm_router/router_args.py``), written once in :data:`ttlctl.router_doc.SETTINGS`:
:data:`TAKES`, the flags, the checks of :class:`RouterSettings` and its defaults are that
table's (Program scheduling's two settings are its own: its config JSON is checked by
:class:`~replay.fleet.routers.progress_ttl.ProgramSchedulingConfig`). Each module names
the file it follows and its deliberate differences."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from profiles.router_calibration import RouterCalibration
from replay.fleet.routers.as_logged import AsLogged, replica_order
from replay.fleet.routers.base import FleetView, RoutedCall, Router
from replay.fleet.routers.cache_aware import CacheAware
from replay.fleet.routers.consistent_hash import ConsistentHash
from replay.fleet.routers.kv_aware import KvAware
from replay.fleet.routers.pin_aware import PinAware
from replay.fleet.routers.power_of_two import PowerOfTwo
from replay.fleet.routers.program_scheduling import ProgramScheduling
from replay.fleet.routers.progress_ttl import ProgramSchedulingConfig, calibration_of
from replay.fleet.routers.random_pick import RandomPick
from replay.fleet.routers.round_robin import RoundRobin
from replay.fleet.routers.sticky_least_loaded import StickyLeastLoaded
from ttlctl.errors import ConfigError, TtlctlError
from ttlctl.router_doc import (
    CALIBRATIONS,
    KV_AWARE,
    PROGRAM_SCHEDULING,
    ROUTERS,
    SETTINGS,
    check_settings,
    flag_name,
    program_scheduling_fields,
    ttlctl_name,
)

__all__ = [
    "AS_LOGGED",
    "ROUTERS",
    "TAKES",
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


#: ttlctl's name of a router given in vLLM's router's spelling (``cache_aware``,
#: ``round_robin``, …) or in ttlctl's own: the bundle's reader's rule, one for both
router_name = ttlctl_name


#: the routers whose placement hashes the workers' URLs (``worker_urls``); Program
#: scheduling does too when it binds programs by ``consistent_hash``, its default
URL_HASHING = ("consistent-hash", "sticky-least-loaded")

#: a setting's value (Program scheduling's config has strings and booleans too)
Setting = float | int | str | None

#: Program scheduling's settings: its config JSON and the calibration it runs on (not in
#: router_doc's table: vllm-router reads the JSON itself)
PROGRAM_SCHEDULING_TAKES = ("program_scheduling_config_json", "program_scheduling_calibration")
#: the settings each router takes, router_doc's table's (each one's flag is
#: :func:`~ttlctl.router_doc.flag_name`'s)
TAKES: dict[str, tuple[str, ...]] = {name: tuple(SETTINGS.get(name, {})) for name in ROUTERS} | {
    PROGRAM_SCHEDULING: PROGRAM_SCHEDULING_TAKES
}


@dataclass(frozen=True, slots=True)
class RouterSettings:
    """A router and its settings; unset (None) settings take the real router's default."""

    name: str = "cache-aware"
    cache_threshold: float | None = None
    balance_abs_threshold: int | None = None
    balance_rel_threshold: float | None = None
    kv_aware_session_affinity_ttl_secs: int | None = None
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
        takes = TAKES[self.name]
        for f in fields(self):
            if f.name != "name" and getattr(self, f.name) is not None and f.name not in takes:
                raise ConfigError(
                    f"{flag_name(f.name)}: the {self.name} router does not take it"
                    + (
                        f" (it takes {', '.join(map(flag_name, takes))})"
                        if takes
                        else " (it takes no router setting)"
                    )
                )
        # each setting as the router's flag takes it (unset: the router's default)
        for key, flag in SETTINGS.get(self.name, {}).items():
            value = getattr(self, key)
            why = None if value is None else flag.refusal(value)
            if why is not None:
                raise ConfigError(f"{flag_name(key)}: {why}")
        if self.program_scheduling_config_json is not None:
            ProgramSchedulingConfig.from_json(self.program_scheduling_config_json)
        cal = self.program_scheduling_calibration
        if cal is not None and cal not in CALIBRATIONS:
            raise ConfigError(
                f"--program-scheduling-calibration takes {' or '.join(CALIBRATIONS)}, not {cal!r}"
            )

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> RouterSettings:
        """The router a bundle's ``router`` section names, with its settings (the inverse of
        :meth:`resolved`: Program scheduling's config fields, ``obj.field`` calibration
        fields and ``calibration``); :class:`~ttlctl.errors.ConfigError` for a setting
        the router would refuse. Integer flags written as 30.0 are taken as 30."""
        name = router_name(str(section.get("name")))
        settings = dict(section.get("settings") or {})
        if name == PROGRAM_SCHEDULING:
            config, objects = program_scheduling_fields(settings)
            doc = {**config, **objects}
            cal = settings.get("calibration")
            return cls(
                name,
                program_scheduling_config_json=json.dumps(doc),
                program_scheduling_calibration=None if cal is None else str(cal),
            )
        try:  # the bundle reader's check: a key the router does not take, a bad value
            check_settings(name, settings)
        except TtlctlError as exc:
            raise ConfigError(str(exc)) from None
        flags = SETTINGS.get(name, {})
        typed: dict[str, Any] = {
            key: int(value) if key in flags and flags[key].integer and value is not None else value
            for key, value in settings.items()
        }
        return cls(name, **typed)

    def program_scheduling(self) -> tuple[ProgramSchedulingConfig, dict[str, Any]]:
        """Program scheduling's config (defaults filled) and the calibration objects given
        in its JSON."""
        return ProgramSchedulingConfig.from_json(self.program_scheduling_config_json or "{}")

    def hashes_urls(self) -> bool:
        """Whether where this router sends a program depends on the workers' URLs (it
        hashes them, as the real router hashes the URLs it is given): then a replay without
        the real fleet's URLs places programs as no real fleet of other URLs would."""
        if self.name == PROGRAM_SCHEDULING:
            return self.program_scheduling()[0].binding_strategy == "consistent_hash"
        return self.name in URL_HASHING

    def resolved(self) -> dict[str, Setting]:
        """The settings this router takes, with the real router's defaults filled in
        (Program scheduling: its config's fields, and ``calibration``)."""
        if self.name == PROGRAM_SCHEDULING:
            cfg, given = self.program_scheduling()
            return {
                **cfg.to_json(),
                **{f"{k}.{f}": v for k, obj in given.items() for f, v in obj.items()},
                "calibration": self.program_scheduling_calibration or "profile",
            }
        out: dict[str, Setting] = {}
        for key, flag in SETTINGS[self.name].items():
            value = getattr(self, key)
            out[key] = flag.default if value is None else value
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
    prefix_credit: bool = True,
) -> Router:
    """A fresh router (no state survives between replays). ``calibration``: the replay's
    profile as Program scheduling's calibration (None: the router's reference one).
    ``worker_urls``: the replicas' URLs as the real router is given them, in replica
    order; the routers that hash them (``consistent-hash``, ``sticky-least-loaded``,
    Program scheduling's ``consistent_hash`` binding) then place sessions as it does
    (None: :func:`~replay.fleet.routers.consistent_hash.default_urls`). ``prefix_credit``:
    whether ``kv-aware`` credits calls with their cached prefix (off for clients whose
    requests it does not credit: :mod:`~replay.fleet.routers.kv_credit`)."""
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
    if name == KV_AWARE:
        ttl = s["kv_aware_session_affinity_ttl_secs"]
        return KvAware(
            rng,
            block_size=block_size,
            router_temperature=float(s["router_temperature"] or 0.0),
            kv_aware_session_affinity_ttl_secs=None if ttl is None else float(ttl),
            prefix_credit=prefix_credit,
        )
    if name == "sticky-least-loaded":
        return StickyLeastLoaded(urls=worker_urls)
    if name == "pin-aware":
        return PinAware(pin_queue_bound=int(s["pin_queue_bound"] or 0))
    if name == PROGRAM_SCHEDULING:
        cfg, given = settings.program_scheduling()
        prefill, decode = calibration_of(given, calibration)
        return ProgramScheduling(cfg, prefill, decode, replicas, worker_urls)
    return AsLogged(logged_replicas, replicas)
