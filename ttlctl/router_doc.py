"""What a bundle's ``router`` section may hold: each router's settings, typed as
vllm-router 0.1.17's flags take them (``vllm_router/router_args.py``), and the check that
refuses a value the router would refuse.

The names are ttlctl's (``cache-aware``); vllm-router's spelling (``cache_aware``) names the
same router and is taken too. The settings are vllm-router's flag names with underscores
(``balance_abs_threshold`` for ``--balance-abs-threshold``), as ``ttlctl tune`` writes them;
the flag's spelling is refused with the key to write instead. ``pin_queue_bound`` is
pin-aware's own (ttlctl's router). Program scheduling's settings are the fields of its
config JSON, which the router reads itself: they are not typed here.

This is the one table of the routers' settings: the simulator's router models
(``replay.fleet.routers``) take these settings, refuse what :meth:`Flag.refusal` refuses
and fill in :attr:`Flag.default`; ``bundle query --as vllm-router`` writes these flags.
Tests keep the models, the command line and tune's search space in step with it.
Pure: imports only the base error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ttlctl.errors import TtlctlError

PROGRAM_SCHEDULING = "program-scheduling"
#: ttlctl's name of vllm-router's ``kv_aware`` policy
KV_AWARE = "kv-aware"
#: Program scheduling's enable key that opts a request with an ``X-Session-ID`` header (what
#: a replay sends) into it; the router's default takes only ``vllm_xargs.agentic_context``
#: and would leave every replayed call to ``--policy``
ENABLE_KEY = "auto"
#: the coefficients Program scheduling runs on: ``profile`` (calibrated from a profile,
#: ttlctl's default) or ``reference`` (the router's own)
CALIBRATIONS = ("profile", "reference")
#: what a real router does that ttlctl's model of it leaves out (the deliberate differences
#: its module in ``replay.fleet.routers`` lists), named where a replay shows the router
NOT_MODELLED: dict[str, tuple[str, ...]] = {
    PROGRAM_SCHEDULING: (
        "the growth reserve",
        "batch-gain admission",
        "capacity repair",
        "segment yield",
        "privileged hand-off",
        "shared-prefix discounting",
    ),
}
#: ttlctl's routers, in the comparison table's order: vllm-router's policies (with dashes),
#: its Program scheduling, ttlctl's own pin-aware, and the placement a trace recorded
ROUTERS = (
    "round-robin",
    "random",
    "power-of-two",
    "consistent-hash",
    "cache-aware",
    "kv-aware",
    "sticky-least-loaded",
    "pin-aware",
    PROGRAM_SCHEDULING,
    "as-logged",
)
#: vllm-router 0.1.17's request-level policies (``--policy``), its default first
POLICIES = (
    "cache_aware",
    "round_robin",
    "random",
    "power_of_two",
    "consistent_hash",
    "sticky_least_loaded",
    "kv_aware",
)


@dataclass(frozen=True, slots=True)
class Flag:
    """One setting as the router's flag takes it: an integer or a number, in [low, high];
    ``default``: the router's when the flag is not given; ``nullable``: null is the
    router's own default (no session affinity); ``vllm_router``: a vllm-router flag
    (False: ttlctl's own router's, which vllm-router does not take). A number that is
    not finite is refused, although vllm-router starts with ``--balance-rel-threshold
    inf`` (or ``nan``): a bundle's JSON cannot hold one (``inf`` turns the relative
    balance rule off; a ratio as large as wanted does the same)."""

    integer: bool
    default: float | None
    low: float = 0.0
    high: float = math.inf
    nullable: bool = False
    vllm_router: bool = True

    def refusal(self, value: Any) -> str | None:
        """Why ``value`` is not one this flag takes (None: it is)."""
        if value is None:
            return None if self.nullable else "null is not a value of it"
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or not math.isfinite(value):
            kind = "an integer" if self.integer else "a number"
            return f"{json_text(value)} is not {kind}"
        if self.integer and not float(value).is_integer():
            return f"{json_text(value)} is not an integer"
        if not self.low <= value <= self.high:
            low = number_text(self.low)
            span = f"{low} or more" if math.isinf(self.high) else f"{low}..{number_text(self.high)}"
            return f"{json_text(value)} is out of range ({span})"
        return None


#: each router's settings (ttlctl's names; the routers that take none map to {})
SETTINGS: dict[str, dict[str, Flag]] = {
    "round-robin": {},
    "random": {},
    "power-of-two": {},
    "consistent-hash": {},
    "cache-aware": {
        "cache_threshold": Flag(integer=False, default=0.3, high=1.0),
        # a usize in vllm-router (its parser's int, converted when it starts)
        "balance_abs_threshold": Flag(integer=True, default=64, high=2**64 - 1),
        # vllm-router refuses a ratio under 1 when it starts, after its parser took it
        # (its Rust ``ConfigValidator``: "balance_rel_threshold ... Must be >= 1.0")
        "balance_rel_threshold": Flag(integer=False, default=1.5, low=1.0),
    },
    "kv-aware": {
        # vllm-router's parser takes an int (``type=int``), and refuses one outside
        # 1..31536000 (``RouterArgs._validate_router_args``); unset: no session affinity
        "kv_aware_session_affinity_ttl_secs": Flag(
            integer=True, default=None, low=1, high=31_536_000, nullable=True
        ),
        "router_temperature": Flag(integer=False, default=0.0),
    },
    "sticky-least-loaded": {},
    "pin-aware": {"pin_queue_bound": Flag(integer=True, default=8, vllm_router=False)},
    "as-logged": {},
}


def flag_name(key: str) -> str:
    """A setting's command-line flag (``--cache-threshold`` for ``cache_threshold``)."""
    return "--" + key.replace("_", "-")


def default_of(router: str, key: str) -> float:
    """A setting's default as a number (for the router models' fields; not a nullable
    setting's, whose default is null)."""
    value = SETTINGS[router][key].default
    if value is None:
        raise KeyError(f"{router}'s {key} has no number for its default")
    return value


def number_text(value: float) -> str:
    """A number as a message writes it (``31536000``, ``0``, ``0.5``)."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def json_text(value: Any) -> str:
    """A value as the bundle's JSON spells it."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    return repr(value) if isinstance(value, str) else str(value)


def program_scheduling_fields(
    settings: Mapping[str, Any],
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """A ``program-scheduling`` section's settings as its config JSON's fields and the
    calibration objects' fields it gives (``obj.field`` keys, as ``resolved()`` writes
    them); ``calibration`` (ttlctl's choice of coefficients) is neither."""
    fields: dict[str, Any] = {}
    objects: dict[str, dict[str, Any]] = {}
    for key, value in settings.items():
        if key == "calibration":
            continue
        if "." in key:
            obj, field = key.split(".", 1)
            objects.setdefault(obj, {})[field] = value
        else:
            fields[key] = value
    return fields, objects


def ttlctl_name(name: str) -> str:
    """ttlctl's name of a router given in either spelling (``cache_aware``, ``cache-aware``)."""
    return name.replace("_", "-")


def check_settings(name: str, settings: Mapping[str, Any]) -> None:
    """Refuse (:class:`~ttlctl.errors.TtlctlError`, one line naming the key) a router the
    section cannot name, or a setting its router does not take or would refuse."""
    router = ttlctl_name(name)
    if router == PROGRAM_SCHEDULING:
        return  # its config's fields: vllm-router reads the JSON itself
    takes = SETTINGS.get(router)
    if takes is None:
        known = ", ".join(ROUTERS)
        raise TtlctlError(f"router.name: {name!r} is not a router ttlctl knows ({known})")
    for key, value in settings.items():
        where = f"router.settings.{key}"
        flag = takes.get(key.replace("-", "_"))
        if flag is None:
            offer = ", ".join(takes) or "none"
            raise TtlctlError(f"{where}: the {router} router does not take it (it takes: {offer})")
        if "-" in key:
            raise TtlctlError(
                f"{where}: write it {key.replace('-', '_')} (vllm-router's flag name with "
                "underscores, as ttlctl tune writes it)"
            )
        why = flag.refusal(value)
        if why is not None:
            owner = "vllm-router's" if flag.vllm_router else f"ttlctl's {router}"
            raise TtlctlError(f"{where}: {why}, for {owner} {flag_name(key)}")
