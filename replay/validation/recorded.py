"""A validation's document read back: what its simulated side was built from.

Both kinds of ``validate`` document keep, beside their rows, everything their simulated side
was built from: the live runs (``live``; a fleet's ``fleets`` too: each replica's URL and
arrivals file, the router's worker order), the engine's sizes (``engine``), the profile's
measurements with their raw timings (``profile``), and the ``simulation`` record
(:mod:`~replay.validation.sim_record`). :func:`read_recorded` reads either back as a
:class:`Recorded` (a fleet's own settings in :class:`RecordedFleet`),
:func:`recorded_live` a single server's live runs and :func:`check_fingerprint` checks a
trace against the programs recorded, for :mod:`~replay.validation.resimulate` (a fleet's
live runs: :mod:`~replay.validation.recorded_runs`).
Nothing is re-guessed: a document that lacks what the simulation needs (one written before
validate recorded it, or damaged) is refused with a
:class:`~replay.validation.error.ValidateError` naming the file and what is missing. Paths
are read as recorded: absolute since validate records them so; an older document's relative
paths from the current directory.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiles.engine_fit import fit_samples
from profiles.engine_timings import samples_from_json
from profiles.profile_read import from_json as profile_from_json
from profiles.schema import Profile
from replay.client_tags import CLIENT_TAGS, FULL
from replay.fleet.routers import RouterSettings
from replay.policy_runs import Load
from replay.scheduler import SimSchedulerConfig
from replay.validation.error import ValidateError
from replay.validation.fleet_profile import Measured
from replay.validation.sim_record import workload_fingerprint
from replay.validation.timings import Timings
from replay.vllmsim.backend import BACKENDS
from replay.workload import Workload
from ttlctl.errors import ConfigError
from ttlctl.jsonfile import JsonFileError, read_json_object

#: what every validation document needs for its simulated side beyond the rows (top-level
#: keys) ...
NEEDED = ("policies", "programs", "calls", "engine", "live", "profile")
#: ... and in its ``simulation`` record
NEEDED_SIMULATION = ("idle_gap_cap_s", "load", "workload", "bundle_sha256")
#: what a fleet validation's needs besides (top-level keys, and in ``simulation``)
NEEDED_FLEET = ("replicas", "routers", "repeats", "async_scheduling", "fleets")
NEEDED_FLEET_SIMULATION = ("timings", "router_settings")
#: what a single-server validation's needs besides, in its ``config``
NEEDED_CONFIG = ("repeats", "backend", "async_scheduling")


@dataclass(frozen=True, slots=True)
class RecordedFleet:
    """What only a fleet validation's document records: its size, its routers, the
    perturbed timings and the routers' simulated settings."""

    replicas: int
    routers: list[str]
    timings: Timings
    settings: dict[str, RouterSettings]


@dataclass(frozen=True, slots=True)
class Recorded:
    """A validation's document, read back: its settings and what priced its runs."""

    path: Path
    doc: dict[str, Any]
    policies: list[str]
    repeats: int
    programs: int
    engine: SimSchedulerConfig
    #: the servers (live and simulated) scheduled a step ahead, as vLLM's async scheduling
    async_scheduling: bool
    #: the simulator the policies ran on (a fleet's: always ``fast``)
    backend: str
    #: what the clients tagged each call with (``--client-tags``; a document from before
    #: validate recorded it: ``full``, the only tagging there was)
    client_tags: str
    idle_gap_cap_s: float | None
    load: Load
    #: :func:`~replay.validation.sim_record.workload_fingerprint` of the programs replayed
    workload: dict[str, Any]
    #: the trace as recorded (None: the document names none)
    trace: Path | None
    bundle: Path | None
    bundle_sha256: str | None
    #: the measurements (none: the profile was given) and the profile that priced the runs
    measured: list[Measured]
    profile: Profile
    profile_source: str | None
    #: a fleet validation's own settings (None: a single-server validation)
    fleet: RecordedFleet | None


def read_document(path: Path) -> dict[str, Any]:
    """The JSON document at ``path``; :class:`ValidateError` (one line) if it is missing or
    not a JSON object (:func:`ttlctl.jsonfile.read_json_object`)."""
    try:
        return read_json_object(path, "a validate document")
    except JsonFileError as exc:
        raise ValidateError(str(exc)) from None


def read_recorded(path: Path) -> Recorded:
    """The validation recorded at ``path``, a fleet's or a single server's;
    :class:`ValidateError` naming the file and what is wrong: unreadable, not a validate
    document, or lacking (or damaged in) what the simulated side needs."""
    doc = read_document(path)
    fleet = "replicas" in doc
    if not fleet and "rows" not in doc:
        raise ValidateError(f"{path}: not a validate document (no 'rows' nor 'replicas')")
    needed = NEEDED + (NEEDED_FLEET if fleet else ("config",))
    missing = [k for k in needed if k not in doc]
    sim = doc.get("simulation")
    if not isinstance(sim, dict):
        missing.insert(0, "simulation")
    else:
        wanted = NEEDED_SIMULATION + (NEEDED_FLEET_SIMULATION if fleet else ())
        missing += [f"simulation.{k}" for k in wanted if k not in sim]
    config = doc.get("config")
    if not fleet and isinstance(config, dict):
        missing += [f"config.{k}" for k in NEEDED_CONFIG if k not in config]
    if missing or not isinstance(sim, dict):
        raise ValidateError(
            f"{path}: lacks {', '.join(missing)}, which re-simulating needs (a document "
            "written before validate recorded them cannot be re-simulated)"
        )
    unwritten = non_finite(doc)
    if unwritten is not None:  # validate writes strict JSON: never NaN nor Infinity
        raise ValidateError(f"{path}: {unwritten}, which validate never writes; damaged?")
    try:
        return _parsed(path, doc, sim)
    except ValidateError:
        raise
    except ConfigError as exc:  # one line naming the field already
        raise ValidateError(f"{path}: {exc}") from None
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise damaged(path, doc, exc) from None


def damaged(path: Path, doc: Mapping[str, Any], exc: Exception) -> ValidateError:
    """The one-line refusal of a document damaged where ``exc`` was raised reading it."""
    kind = "fleet" if "replicas" in doc else "single-server"
    return ValidateError(f"{path}: damaged {kind} document ({type(exc).__name__}: {exc})")


def non_finite(value: Any, where: str = "") -> str | None:
    """The first NaN or ±Infinity in a JSON value, as ``field is NaN`` (None: none): Python
    reads them, but they are not JSON, and a document written back with one fails."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{where or 'the document'} is {json.dumps(value)}"
    items: Iterable[tuple[str, Any]] = ()
    if isinstance(value, dict):
        items = ((f"{where}.{k}" if where else str(k), v) for k, v in value.items())
    elif isinstance(value, list):
        items = ((f"{where}[{i}]", v) for i, v in enumerate(value))
    for field, inner in items:
        found = non_finite(inner, field)
        if found is not None:
            return found
    return None


def _parsed(path: Path, doc: dict[str, Any], sim: dict[str, Any]) -> Recorded:
    measured = [_measured(path, m) for m in doc["profile"]["measurements"]]
    bundle = doc.get("bundle")
    trace = doc.get("trace")
    # a fleet's settings at the top; a single server's in its ``config``
    fleet = _fleet(doc, sim) if "replicas" in doc else None
    settings = doc if fleet is not None else doc["config"]
    return Recorded(
        path=path,
        doc=doc,
        policies=[str(p) for p in doc["policies"]],
        repeats=int(settings["repeats"]),
        programs=int(doc["programs"]),
        engine=SimSchedulerConfig.from_json(doc["engine"], "engine"),
        async_scheduling=_flag(settings["async_scheduling"], "async_scheduling"),
        backend="fast" if fleet is not None else _backend(settings["backend"]),
        client_tags=_client_tags(
            settings.get("client_tags", FULL),
            "client_tags" if fleet is not None else "config.client_tags",
        ),
        idle_gap_cap_s=_cap(sim["idle_gap_cap_s"], "simulation.idle_gap_cap_s"),
        load=Load(**sim["load"]),
        workload=dict(sim["workload"]),
        trace=None if trace is None else Path(trace),
        bundle=None if bundle is None else Path(bundle),
        bundle_sha256=sim["bundle_sha256"],
        measured=measured,
        profile=profile_from_json(doc["profile"]["doc"], f"{path}: profile.doc"),
        profile_source=doc["profile"].get("source"),
        fleet=fleet,
    )


def _fleet(doc: Mapping[str, Any], sim: Mapping[str, Any]) -> RecordedFleet:
    return RecordedFleet(
        replicas=int(doc["replicas"]),
        routers=[str(r) for r in doc["routers"]],
        timings=Timings(**sim["timings"]),
        settings={r: RouterSettings(**s) for r, s in sim["router_settings"].items()},
    )


def _backend(value: Any) -> str:
    """A single server's ``config.backend``: one of the simulators (:data:`BACKENDS`)."""
    if value not in BACKENDS:
        raise ConfigError(
            f"config.backend is {json.dumps(value)[:40]}, not one of {', '.join(BACKENDS)}"
        )
    return str(value)


def _cap(value: Any, key: str) -> float | None:
    """A recorded pause cap: null (none) or seconds, 0 or more (as
    --trace-idle-gap-cap-seconds takes it: 0 sets every pause to 0)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ConfigError(f"{key} is {json.dumps(value)[:40]}, not seconds (0 or more) nor null")
    return float(value)


def _client_tags(value: Any, key: str) -> str:
    """The recorded ``client_tags`` (at ``key``): one of
    :data:`~replay.client_tags.CLIENT_TAGS`."""
    if value not in CLIENT_TAGS:
        raise ConfigError(f"{key} is {json.dumps(value)[:40]}, not one of {', '.join(CLIENT_TAGS)}")
    return str(value)


def _flag(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{key} is {value!r}, not true or false")
    return value


def _measured(path: Path, m: Mapping[str, Any]) -> Measured:
    """A recorded measurement, fitted again from its timings by this ttlctl's fit."""
    samples = samples_from_json(m["samples"], f"{path}: measurement {m.get('repeat')}")
    return Measured(
        int(m["repeat"]), str(m["source"]), int(m["others_served"]), samples, fit_samples([samples])
    )


def recorded_live(rec: Recorded) -> dict[str, dict[str, Any]]:
    """A single-server validation's live runs as recorded (validate keeps each policy's
    runs merged into one: :func:`~replay.validation.stats.merge_runs`); refused
    (:class:`ValidateError` naming the file) where a policy's are missing."""
    live = rec.doc["live"]
    got = live if isinstance(live, dict) else {}
    lacking = [n for n in rec.policies if not isinstance(got.get(n), dict)]
    if lacking:
        raise ValidateError(
            f"{rec.path}: damaged single-server document (no live runs of {', '.join(lacking)})"
        )
    return {n: got[n] for n in rec.policies}


def check_fingerprint(rec: Recorded, work: Workload, trace: Path) -> None:
    """Refuse a trace whose programs (its first ``programs``, pauses capped as recorded)
    are not those the document replayed, saying how they differ."""
    seen = workload_fingerprint(work)
    want = rec.workload
    if seen == want:
        return
    cap = "" if rec.idle_gap_cap_s is None else f", pauses capped at {rec.idle_gap_cap_s:g} s"
    if seen["program_ids"] != want.get("program_ids"):
        how = f"programs {seen['program_ids']} against {want.get('program_ids')} recorded"
    elif seen["calls"] != want.get("calls"):
        how = f"{seen['calls']} calls against {want.get('calls')} recorded"
    else:
        how = "the same programs and calls, but their tokens, tools or pauses differ"
    raise ValidateError(
        f"{trace}: its first {rec.programs} programs{cap} are not those {rec.path} replayed: {how}"
    )
