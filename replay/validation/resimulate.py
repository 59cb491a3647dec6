"""``ttlctl validate --resimulate RECORDED.json``: a validation's live runs priced again by
this ttlctl's simulator, with nothing started live.

The recorded document (:mod:`~replay.validation.recorded`), a fleet validation's or a single
server's, names the trace and keeps what the simulated side was built from; a fleet's live
runs' replicas are read again from their arrivals files, a single server's live runs are the
document's ``live``. Everything is then simulated and judged by the same code validate ends
with (:func:`~replay.validation.fleet_doc.judged_runs`,
:func:`~replay.validation.server_doc.judged_policies`), priced as the document was (its
measurements fitted again from their raw timings: a fleet's each repeat's runs by that
repeat's own, the pooled one beside it, a single server's by them pooled; or the profile
it was given), or by ``profile`` when one is given (every run by it, as validate prices with
``--profile``). The result has the recorded document's shape, its judged part replaced, and
says what it was re-simulated from (``resimulated``). With the code that wrote it, a
document re-simulates to its own rows, ranking and goals exactly; after a change to the
simulator, the difference is the change's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiles.schema import Profile
from replay.live import cap_pauses, first_programs
from replay.progress import RunsDone
from replay.validation.error import ValidateError
from replay.validation.fleet_doc import judged_runs
from replay.validation.fleet_profile import ON_FLEETS, by_repeat, pooled
from replay.validation.recorded import (
    Recorded,
    RecordedFleet,
    check_fingerprint,
    read_recorded,
    recorded_live,
)
from replay.validation.recorded_runs import recorded_runs
from replay.validation.server_doc import judged_policies, measured_on
from replay.validation.sim_record import file_sha256
from replay.validation.sim_side import SimSide
from replay.workload import Workload, load
from ttlctl import bundle as bundle_mod
from ttlctl import bundle_doc


def resimulate(
    recorded: Path,
    *,
    trace: Path | None = None,
    profile: Profile | None = None,
    profile_name: str | None = None,
    progress: Callable[[str], None] | None = None,
    runs_done: RunsDone | None = None,
) -> dict[str, Any]:
    """The validation recorded at ``recorded`` re-simulated: its document with its judged
    part (a fleet's rows, rankings, goal, simulated runs and profile; a single server's
    rows, simulated runs, ranking, goals and profile) made again (``trace``: read instead
    of the recorded one; ``profile``, named ``profile_name``: prices every run instead of
    what priced them). ``progress`` is told each step as it starts, ``runs_done`` the
    runs re-simulated of all (a fleet's recorded live runs; a single server's policies).
    :class:`ValidateError` (one line) for a document that cannot be
    re-simulated, a trace that is not the one replayed, a missing arrivals file or a
    changed bundle."""
    say = progress or (lambda message: None)
    rec = read_recorded(recorded)
    work, read = _workload(rec, trace)
    priced = _pricing(rec, profile, profile_name)
    side = SimSide(
        replicas=1 if rec.fleet is None else rec.fleet.replicas,
        profile=priced.by,
        engine=rec.engine,
        timing=rec.load,
        bundle=_bundle(rec),
        settings={} if rec.fleet is None else rec.fleet.settings,
        async_scheduling=rec.async_scheduling,
        client_tags=rec.client_tags,
    )
    if rec.fleet is None:
        judged = judged_policies(
            work,
            side,
            recorded_live(rec),
            policies=rec.policies,
            backend=rec.backend,
            profile_source=priced.source,
            measurements=priced.measurements,
            say=say,
            runs_done=runs_done,
        )
    else:
        judged = _fleet(rec, rec.fleet, work, side, priced, say, runs_done)
    return {
        **rec.doc,
        **judged,
        "resimulated": {
            #: the recorded document this one re-simulates, and the trace read
            "from": str(recorded.resolve()),
            "trace": str(read.resolve()),
            #: "recorded": priced as the document was; else the profile given
            "profile": profile_name if profile is not None else "recorded",
            "pricing": priced.words,
        },
    }


@dataclass(frozen=True, slots=True)
class _Pricing:
    """What prices a re-simulation: ``by`` (said to come from ``source``), each repeat's
    own where a fleet's repeats were measured apart (``own``), the measurements as the
    document keeps them, and how, in words."""

    by: Profile
    source: str | None
    own: dict[int, Profile]
    measurements: list[Mapping[str, Any]]
    words: str


def _pricing(rec: Recorded, profile: Profile | None, name: str | None) -> _Pricing:
    """Priced by ``profile`` when one is given, else as the document was: its measurements
    fitted again (a fleet's each repeat by its own, pooled beside it; a single server's
    pooled, as measured on its first policy's server), or the profile it was given."""
    if profile is not None:
        return _Pricing(
            profile, "given", {}, [], f"every run by the profile given ({name or 'given'})"
        )
    measurements = list(rec.doc["profile"]["measurements"])
    if not rec.measured:
        words = "as recorded: every run by the profile validate was given"
        return _Pricing(rec.profile, rec.profile_source, {}, measurements, words)
    where = ON_FLEETS if rec.fleet is not None else measured_on(rec.policies[0])
    by, source = pooled(rec.measured, where)
    own = by_repeat(rec.measured, rec.repeats) if rec.fleet is not None else {}
    if len(own) > 1:
        words = (
            "as recorded: each repeat's runs by that repeat's own measurement, the "
            "measurements pooled beside it"
        )
    elif len(rec.measured) > 1:
        words = f"as recorded: every run by the {len(rec.measured)} measurements pooled"
    else:
        words = "as recorded: by the one measurement"
    return _Pricing(by, source, own, measurements, words)


def _fleet(
    rec: Recorded,
    fleet: RecordedFleet,
    work: Workload,
    side: SimSide,
    priced: _Pricing,
    say: Callable[[str], None],
    runs_done: RunsDone | None,
) -> dict[str, Any]:
    """A fleet validation's judged part made again from its recorded live runs."""
    runs = recorded_runs(rec, fleet)
    say(f"re-simulating {len(runs)} recorded live runs")
    return judged_runs(
        runs,
        work,
        side,
        priced.own,
        fleet.timings,
        policies=rec.policies,
        routers=fleet.routers,
        repeats=rec.repeats,
        profile_source=priced.source,
        measurements=priced.measurements,
        runs_done=runs_done,
    )


def _workload(rec: Recorded, trace: Path | None) -> tuple[Workload, Path]:
    """The programs the document replayed: its first ``programs`` of the trace (the one
    given, else the recorded one), pauses capped as recorded, checked against its
    fingerprint; and the trace read."""
    path = trace or rec.trace
    if path is None:
        raise ValidateError(f"{rec.path}: names no trace; give TRACE")
    if not path.is_file():
        raise ValidateError(
            f"{path}: no such trace (named by {rec.path}"
            + ("" if trace is not None or path.is_absolute() else "; read from here")
            + ")"
        )
    work = cap_pauses(first_programs(load(path), rec.programs), rec.idle_gap_cap_s)
    check_fingerprint(rec, work, path)
    return work, path


def _bundle(rec: Recorded) -> bundle_doc.Bundle | None:
    """The continuum bundle the runs were simulated with (None: none), refused if it
    changed since."""
    if rec.bundle is None:
        return None
    if not rec.bundle.is_file():
        raise ValidateError(f"{rec.path}: its bundle {rec.bundle} is missing")
    if rec.bundle_sha256 is None:  # validate records one beside every bundle
        raise ValidateError(
            f"{rec.path}: damaged document (its bundle {rec.bundle} has no SHA-256 recorded "
            "in simulation.bundle_sha256)"
        )
    if file_sha256(rec.bundle) != rec.bundle_sha256:
        raise ValidateError(f"{rec.bundle}: not the bundle {rec.path} ran with (it changed since)")
    return bundle_mod.read(rec.bundle)
