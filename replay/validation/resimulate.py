"""``ttlctl validate --resimulate RECORDED.json``: a fleet validation's live runs priced
again by this ttlctl's simulator, with nothing started live.

The recorded document (:mod:`~replay.validation.recorded`) names the trace and keeps what
the simulated side was built from; each live run's replicas are read again from their
arrivals files. Every run is then simulated and judged by the same code validate ends with
(:func:`~replay.validation.fleet_doc.judged_runs`), priced as the document was (its
measurements fitted again from their raw timings: each repeat's runs by that repeat's own,
the pooled one beside it; or the profile it was given), or by ``profile`` when one is given
(every run by it, as validate prices with ``--profile``). The result has the recorded
document's shape, its judged part replaced, and says what it was re-simulated from
(``resimulated``). With the code that wrote it, a document re-simulates to its own rows,
ranking and goal exactly; after a change to the simulator, the difference is the change's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from profiles.schema import Profile
from replay.live import cap_pauses, first_programs
from replay.validation.error import ValidateError
from replay.validation.fleet_doc import judged_runs
from replay.validation.fleet_profile import by_repeat, pooled
from replay.validation.recorded import (
    RecordedFleet,
    check_fingerprint,
    file_sha256,
    read_recorded,
    recorded_runs,
)
from replay.validation.sim_side import SimSide
from replay.workload import Workload, load
from ttlctl import bundle as bundle_mod


def resimulate(
    recorded: Path,
    *,
    trace: Path | None = None,
    profile: Profile | None = None,
    profile_name: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The fleet validation recorded at ``recorded`` re-simulated: its document with the
    rows, ranking, goal, simulated runs and profile made again (``trace``: read instead of
    the recorded one; ``profile``, named ``profile_name``: prices every run instead of what
    priced them). :class:`ValidateError` (one line) for a document that cannot be
    re-simulated, a trace that is not the one replayed, a missing arrivals file."""
    say = progress or (lambda message: None)
    source: str | None
    rec = read_recorded(recorded)
    work, read = _workload(rec, trace)
    runs = recorded_runs(rec)
    if profile is not None:
        own: dict[int, Profile] = {}
        priced_by, source = profile, "given"
        pricing = f"every run by the profile given ({profile_name or 'given'})"
    elif rec.measured:
        own = by_repeat(rec.measured, rec.repeats)
        priced_by, source = pooled(rec.measured)
        pricing = (
            "as recorded: each repeat's runs by that repeat's own measurement, the "
            "measurements pooled beside it"
            if len(own) > 1
            else "as recorded: by the one measurement"
        )
    else:
        own, priced_by, source = {}, rec.profile, rec.profile_source
        pricing = "as recorded: every run by the profile validate was given"
    side = SimSide(
        replicas=rec.replicas,
        profile=priced_by,
        engine=rec.engine,
        timing=rec.load,
        bundle=_bundle(rec),
        settings=rec.settings,
        async_scheduling=rec.async_scheduling,
    )
    say(f"re-simulating {len(runs)} recorded live runs")
    judged = judged_runs(
        runs,
        work,
        side,
        own,
        rec.timings,
        policies=rec.policies,
        routers=rec.routers,
        repeats=rec.repeats,
        profile_source=source,
        measurements=[] if profile is not None else rec.doc["profile"]["measurements"],
    )
    return {
        **rec.doc,
        **judged,
        "resimulated": {
            #: the recorded document this one re-simulates, and the trace read
            "from": str(recorded.resolve()),
            "trace": str(read.resolve()),
            #: "recorded": priced as the document was; else the profile given
            "profile": profile_name if profile is not None else "recorded",
            "pricing": pricing,
        },
    }


def _workload(rec: RecordedFleet, trace: Path | None) -> tuple[Workload, Path]:
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


def _bundle(rec: RecordedFleet) -> bundle_mod.Bundle | None:
    """The continuum bundle the runs were simulated with (None: none), refused if it
    changed since."""
    if rec.bundle is None:
        return None
    if not rec.bundle.is_file():
        raise ValidateError(f"{rec.path}: its bundle {rec.bundle} is missing")
    if rec.bundle_sha256 is not None and file_sha256(rec.bundle) != rec.bundle_sha256:
        raise ValidateError(f"{rec.bundle}: not the bundle {rec.path} ran with (it changed since)")
    return bundle_mod.read(rec.bundle)
