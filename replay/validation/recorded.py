"""What a validation's document records for its simulated side, and reading it back.

Both kinds of ``validate`` document keep, beside their rows, everything their simulated side
was built from: the live runs (``live``; a fleet's ``fleets`` too: each replica's URL and
arrivals file, the router's worker order), the engine's sizes (``engine``), the profile's
measurements with their raw timings (``profile``), and :func:`simulation_record`: the pause
cap, the load, a fingerprint of the programs replayed (:func:`workload_fingerprint`) and of
the continuum bundle (a fleet's adds the perturbed timings' settings and the routers'
simulated settings). :func:`read_recorded` reads either back as a :class:`Recorded` (a
fleet's own settings in :class:`RecordedFleet`), and :func:`recorded_runs` a fleet's live
runs (each replica's arrivals file read again), for :mod:`~replay.validation.resimulate`.
Nothing is re-guessed: a document that lacks what the simulation needs (one written before
validate recorded it, or damaged) is refused with a
:class:`~replay.validation.error.ValidateError` naming the file and what is missing. Paths
are read as recorded: absolute since validate records them so; an older document's relative
paths from the current directory.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from profiles.engine_fit import fit_samples
from profiles.engine_timings import samples_from_json
from profiles.schema import Profile
from profiles.schema import from_json as profile_from_json
from replay.fleet.routers import RouterSettings
from replay.policy_runs import Load
from replay.scheduler import SimSchedulerConfig
from replay.validation.error import ValidateError
from replay.validation.fleet_profile import Measured
from replay.validation.fleet_rows import LiveRun
from replay.validation.timings import Timings
from replay.workload import Workload
from ttlctl.server import arrivals

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


def workload_fingerprint(work: Workload) -> dict[str, Any]:
    """The programs replayed, as a document can check them: their ids, their calls, and a
    SHA-256 over every program's start and every call's tokens, tool, pause and shared
    prefix (after the pause cap)."""
    text = json.dumps(
        [
            [
                p.program_id,
                p.start_s,
                [
                    [
                        c.input_tokens,
                        c.output_tokens,
                        c.reused_tokens,
                        c.tool,
                        c.pause_s,
                        None
                        if c.prefix is None
                        else [list(c.prefix.hashes), c.prefix.block_tokens],
                    ]
                    for c in p.calls
                ],
            ]
            for p in work.programs
        ]
    )
    return {
        "program_ids": [p.program_id for p in work.programs],
        "calls": work.calls,
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
    }


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def simulation_record(
    work: Workload, timing: Load, idle_gap_cap_s: float | None, bundle: Path | None
) -> dict[str, Any]:
    """What the simulated side was built from beyond the document's other keys, for either
    kind of validation: the pause cap, the load, the programs' fingerprint and the bundle's
    SHA-256 (a fleet's adds its own: :func:`~replay.validation.fleet_doc.fleet_document`)."""
    return {
        #: every recorded pause capped at this (None: not capped)
        "idle_gap_cap_s": idle_gap_cap_s,
        "load": asdict(timing),
        "workload": workload_fingerprint(work),
        "bundle_sha256": None if bundle is None else file_sha256(bundle),
    }


def profile_record(
    profile: Profile,
    source: str | None,
    measurements: Sequence[Mapping[str, Any]],
    pricing: str | None = None,
) -> dict[str, Any]:
    """The document's ``profile`` block, either kind of validation: the profile that
    priced the runs, where it came from, how it priced them (a fleet's ``pricing``: "per
    repeat" or "one"), and the measurements it was fitted on, in time order (none: given),
    each with its own fit and its timings (:func:`read_recorded` fits them again)."""
    return {
        "source": source,
        **({} if pricing is None else {"pricing": pricing}),
        "doc": profile.to_json(),
        "measurements": list(measurements),
    }


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
    idle_gap_cap_s: float | None
    load: Load
    #: :func:`workload_fingerprint` of the programs replayed
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
    not a JSON object."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValidateError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValidateError(f"{path}: not a readable JSON document ({exc})") from None
    if not isinstance(doc, dict):
        raise ValidateError(f"{path}: not a validate document (not a JSON object)")
    return doc


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
    try:
        return _parsed(path, doc, sim)
    except ValidateError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise _damaged(path, doc, exc) from None


def _damaged(path: Path, doc: Mapping[str, Any], exc: Exception) -> ValidateError:
    kind = "fleet" if "replicas" in doc else "single-server"
    return ValidateError(f"{path}: damaged {kind} document ({type(exc).__name__}: {exc})")


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
        engine=SimSchedulerConfig(**doc["engine"]),
        async_scheduling=_flag(settings["async_scheduling"], "async_scheduling"),
        backend="fast" if fleet is not None else str(settings["backend"]),
        idle_gap_cap_s=None if sim["idle_gap_cap_s"] is None else float(sim["idle_gap_cap_s"]),
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


def _runs_of(by: Any, policy: str, router: str, repeats: int, what: str) -> list[Any]:
    """The recorded ``what`` (``live`` or ``fleets``) documents of (policy, router): one
    per repeat."""
    got = by[policy][router]
    runs = got if repeats > 1 else [got]
    if not isinstance(runs, list) or len(runs) != repeats:
        raise ValueError(f"{what}.{policy}.{router}: not {repeats} runs")
    return runs


def recorded_runs(rec: Recorded, fleet: RecordedFleet) -> list[LiveRun]:
    """Every live run a fleet validation recorded (``fleet``: its own settings), in the
    order validate ran them (run k of every policy and router before run k + 1 of any),
    each replica's arrivals file read again. Refused (:class:`ValidateError` naming the
    file): a missing arrivals file, or one whose calls per replica are not those the
    document recorded for its run (overwritten since)."""
    doc, path = rec.doc, rec.path
    try:
        lives = {
            (n, r): _runs_of(doc["live"], n, r, rec.repeats, "live")
            for n in rec.policies
            for r in fleet.routers
        }
        fleets = {
            (n, r): _runs_of(doc["fleets"], n, r, rec.repeats, "fleets")
            for n in rec.policies
            for r in fleet.routers
        }
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise _damaged(path, doc, exc) from None
    runs = []
    for rep in range(rec.repeats):
        for name in rec.policies:
            for router in fleet.routers:
                ran = fleets[(name, router)][rep]
                order = _arrivals(path, ran, f"{name} behind {router}, run {rep + 1}")
                live = lives[(name, router)][rep]
                recorded = _recorded_row(doc, name, router, rep, rec.repeats)
                seen = arrivals.per_replica(order)
                if recorded is not None and recorded.get("calls_per_replica") != seen:
                    raise ValidateError(
                        f"{path}: {name} behind {router}, run {rep + 1}: its replicas' "
                        f"arrivals files give calls per replica {seen}, the document "
                        f"recorded {recorded.get('calls_per_replica')} (files overwritten "
                        "by a later run?)"
                    )
                runs.append(LiveRun(rep, name, router, live, order, ran))
    return runs


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


def _arrivals(path: Path, fleet: Mapping[str, Any], which: str) -> dict[str, list[str]]:
    """{session: [replica of each call]} from a recorded fleet's arrivals files, each one
    there (a replica's file holds its warm-up calls at least)."""
    try:
        files = {name: Path(r["arrivals"]) for name, r in fleet["replicas"].items()}
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValidateError(f"{path}: {which}: no arrivals file recorded ({exc})") from None
    for name, file in files.items():
        if not file.is_file():
            raise ValidateError(
                f"{path}: {which}: replica {name}'s arrivals file {file} is missing"
                + ("" if file.is_absolute() else " (a relative path is read from here)")
            )
    try:
        return arrivals.read(files)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValidateError(f"{path}: {which}: an arrivals file is damaged ({exc})") from None


def _recorded_row(
    doc: Mapping[str, Any], policy: str, router: str, rep: int, repeats: int
) -> Mapping[str, Any] | None:
    """The row the document recorded for one run (None: none kept)."""
    row = ((doc.get("rows") or {}).get(policy) or {}).get(router)
    if not isinstance(row, Mapping):
        return None
    if repeats == 1:
        return row
    runs = row.get("runs")
    return runs[rep] if isinstance(runs, Sequence) and len(runs) == repeats else None


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
