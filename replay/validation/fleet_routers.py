"""The routers ``validate --replicas N --router R`` takes, and how each is set up live
(vllm-router's ``--policy`` and Program scheduling config) and simulated (the same
Program scheduling config, on the same calibration).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from profiles.router_calibration import RouterCalibration
from replay.fleet.routers import RouterSettings
from ttlctl.server import router

#: ``--router`` for vllm-router's own Program scheduling: ``consistent_hash`` underneath
#: (its documented pairing), Program scheduling on for every call with an ``X-Session-ID``
#: (``program_scheduling_enable_key: auto``), calibrated from the profile when one is given
PROGRAM_SCHEDULING = router.PROGRAM_SCHEDULING
#: the request-level policy under Program scheduling
PROGRAM_SCHEDULING_POLICY = "consistent_hash"
#: what ``validate --router`` takes: vllm-router's ``--policy`` values and Program scheduling
ROUTERS = router.LIVE_ROUTERS


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
    router: str, calibration: RouterCalibration | None, program_scheduling_json: str | None
) -> tuple[str, str | None]:
    """The router's ``--policy`` and ``--program-scheduling-config-json`` for ``router``."""
    if router != PROGRAM_SCHEDULING:
        return router, program_scheduling_json
    auto = {"program_scheduling_enable_key": "auto"}
    value = calibration.flag_value(auto) if calibration is not None else json.dumps(auto)
    return PROGRAM_SCHEDULING_POLICY, value


def sim_settings(
    routers: Sequence[str],
    calibration: RouterCalibration | None,
    program_scheduling_json: str | None,
) -> dict[str, RouterSettings]:
    """The simulated Program scheduling set as the live router is: the same config JSON,
    on the profile's calibration when the live one is calibrated, else the reference one."""
    if PROGRAM_SCHEDULING not in routers:
        return {}
    value = router_setup(PROGRAM_SCHEDULING, calibration, program_scheduling_json)[1]
    return {
        PROGRAM_SCHEDULING: RouterSettings(
            "program-scheduling",
            program_scheduling_config_json=value,
            program_scheduling_calibration="reference" if calibration is None else "profile",
        )
    }
