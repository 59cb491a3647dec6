"""What a validation's document records for its simulated side, as validate writes it.

Both kinds of ``validate`` document keep, beside their rows, everything their simulated side
was built from; this module builds two of those records: :func:`simulation_record` (the pause
cap, the load, a fingerprint of the programs replayed, :func:`workload_fingerprint`, and of
the continuum bundle; a fleet's adds the perturbed timings' settings and the routers'
simulated settings) and :func:`profile_record` (the profile that priced the runs and the
measurements it was fitted on). Reading them back is :mod:`~replay.validation.recorded`'s.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from profiles.schema import Profile
from replay.policy_runs import Load
from replay.workload import Workload


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
    each with its own fit and its timings
    (:func:`~replay.validation.recorded.read_recorded` fits them again)."""
    return {
        "source": source,
        **({} if pricing is None else {"pricing": pricing}),
        "doc": profile.to_json(),
        "measurements": list(measurements),
    }
