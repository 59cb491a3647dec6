"""The routers ``validate --replicas N --router R`` takes, and how each is set up live
(vllm-router's ``--policy``, Program scheduling config and other flags) and simulated (the
same settings, Program scheduling on the same calibration).

``--router bundle`` is the router ``--bundle`` was tuned behind (its ``router`` section:
:mod:`ttlctl.router_flags`): started with the flags ``ttlctl bundle query --as
vllm-router`` prints (Program scheduling over ``consistent_hash``, as
:data:`PROGRAM_SCHEDULING` is) and simulated with the same settings, so that a tuned stack
runs live as it would ship.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from profiles import profile_read
from profiles.router_calibration import RouterCalibration
from replay.fleet.routers import RouterSettings
from replay.validation.error import ValidateError
from ttlctl import router_flags
from ttlctl.bundle_doc import Bundle
from ttlctl.errors import ConfigError, FlagError
from ttlctl.router_doc import ENABLE_KEY, ttlctl_name
from ttlctl.router_doc import PROGRAM_SCHEDULING as PROGRAM_SCHEDULING_MODEL
from ttlctl.server import router

#: ``--router`` for vllm-router's own Program scheduling: ``consistent_hash`` underneath
#: (its documented pairing), Program scheduling on for every call with an ``X-Session-ID``
#: (``program_scheduling_enable_key: auto``), calibrated from the profile when one is given
PROGRAM_SCHEDULING = router.PROGRAM_SCHEDULING
#: the request-level policy under Program scheduling
PROGRAM_SCHEDULING_POLICY = "consistent_hash"
#: ``--router`` for the router the bundle was tuned behind, with its settings
BUNDLE = "bundle"
#: what ``validate --router`` takes: vllm-router's ``--policy`` values, Program scheduling
#: and the bundle's router
ROUTERS = (*router.LIVE_ROUTERS, BUNDLE)


@dataclass(frozen=True, slots=True)
class BundleRouter:
    """The router a bundle was tuned behind, as ``--router bundle`` starts and simulates it."""

    #: vllm-router's ``--policy``
    policy: str
    #: ``--program-scheduling-config-json`` (None: Program scheduling off)
    scheduling: str | None
    #: its other flags (``--balance-abs-threshold 12`` …)
    flags: tuple[str, ...]
    #: the same router as the simulator runs it
    settings: RouterSettings


def bundle_router(doc: Bundle, path: Path) -> BundleRouter:
    """The router of ``doc`` (read from ``path``)'s ``router`` section; a
    :class:`ValidateError` naming the file when it has none, one vllm-router lacks
    (``pin-aware``, ``as-logged``), or a setting the router or its model would refuse."""
    section = doc.get("router")
    if section is None:
        raise ValidateError(
            f"--router bundle: {path} records no router (`ttlctl tune --replicas N` records "
            "the one it tuned behind)"
        )
    try:
        args = router_flags.vllm_router_args(section, profile_read.from_json(doc["profile"]))
        if ttlctl_name(section["name"]) == PROGRAM_SCHEDULING_MODEL:
            # simulated on the JSON the live router is given: the bundle profile's
            # calibration, as live (not the profile that prices the simulated engines)
            config = args[args.index("--program-scheduling-config-json") + 1]
            calibration = dict(section.get("settings", {})).get("calibration")
            settings = RouterSettings(
                PROGRAM_SCHEDULING_MODEL,
                program_scheduling_config_json=config,
                program_scheduling_calibration=None if calibration is None else str(calibration),
            )
            return BundleRouter(PROGRAM_SCHEDULING_POLICY, config, (), settings)
        settings = RouterSettings.from_section(section)
    except ConfigError as exc:
        # the section gave the value, not the flag the shared builders name
        why = exc.why if isinstance(exc, FlagError) else str(exc)
        raise ValidateError(f"--router bundle: {path}: {why}") from None
    return BundleRouter(args[1], None, tuple(args[2:]), settings)


def check_router(name: str) -> str:
    """``name`` if ``validate --router`` takes it, else a
    :class:`~ttlctl.server.router.RouterError` naming every one it takes (and vllm-router's
    spelling of a name written as ``replay --router`` writes it). Not
    :func:`~ttlctl.server.router.check_policy`'s list: that one is the ``--policy`` the
    router is started with, which ``program_scheduling`` is not (:func:`router_setup`
    starts it as ``consistent_hash`` with Program scheduling on)."""
    if name in ROUTERS:
        return name
    spelled = name.replace("-", "_")
    hint = f" (vllm-router's spelling: {spelled})" if spelled in ROUTERS else ""
    raise router.RouterError(f"--router takes {', '.join(ROUTERS)}; not {name!r}{hint}")


def router_setup(
    router: str,
    calibration: RouterCalibration | None,
    program_scheduling_json: str | None,
    tuned: BundleRouter | None = None,
) -> tuple[str, str | None, tuple[str, ...]]:
    """The router's ``--policy``, ``--program-scheduling-config-json`` and other flags for
    ``router`` (``tuned``: the bundle's router, for :data:`BUNDLE`)."""
    if router == BUNDLE:
        assert tuned is not None
        return tuned.policy, tuned.scheduling or program_scheduling_json, tuned.flags
    if router != PROGRAM_SCHEDULING:
        return router, program_scheduling_json, ()
    auto = {"program_scheduling_enable_key": ENABLE_KEY}
    value = calibration.flag_value(auto) if calibration is not None else json.dumps(auto)
    return PROGRAM_SCHEDULING_POLICY, value, ()


def sim_settings(
    routers: Sequence[str],
    calibration: RouterCalibration | None,
    program_scheduling_json: str | None,
    tuned: BundleRouter | None = None,
) -> dict[str, RouterSettings]:
    """The simulated Program scheduling set as the live router is: the same config JSON,
    on the profile's calibration when the live one is calibrated, else the reference one;
    and the bundle's router (``tuned``) with its settings."""
    out = {BUNDLE: tuned.settings} if tuned is not None and BUNDLE in routers else {}
    if PROGRAM_SCHEDULING not in routers:
        return out
    value = router_setup(PROGRAM_SCHEDULING, calibration, program_scheduling_json)[1]
    return out | {
        PROGRAM_SCHEDULING: RouterSettings(
            "program-scheduling",
            program_scheduling_config_json=value,
            program_scheduling_calibration="reference" if calibration is None else "profile",
        )
    }
