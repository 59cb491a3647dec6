"""Making a bundle: sealing a fit, a profile and the policy's parameters into a checked
document (:func:`build`, stamped now by :func:`assemble`), from ``bundle build``'s files
(:func:`from_files`) or with no fit (:func:`cold_start`), and writing it (:func:`write`).

Every command that writes a bundle (``bundle build``, ``tune``, ``refit``, a live trial,
``validate``'s cold start) makes it here; :mod:`ttlctl.bundle` reads it back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from fitting import FIT_SCHEMA
from fitting.eta import fitted as eta_fitted
from fitting.eta import from_fit as eta_from_fit
from fitting.fit_doc import FitDoc
from fitting.policy_params import DEFAULT_VALVE, PolicyParams
from profiles.schema import ProfileDoc
from profiles.shipped import resolve
from ttlctl import __version__
from ttlctl.bundle import read_fit
from ttlctl.bundle_check import verify
from ttlctl.bundle_doc import (
    SCHEMA_VERSION,
    Bundle,
    BundleBody,
    BundleError,
    Provenance,
    RouterDoc,
    checksum,
)
from ttlctl.jsonio import file_sha256, write_json


def build(
    fit: FitDoc,
    profile: ProfileDoc,
    params: PolicyParams,
    *,
    created: str,
    ttlctl_version: str,
    provenance: Provenance | None = None,
    router: RouterDoc | None = None,
) -> Bundle:
    """A sealed bundle; raises :class:`BundleError` if the parts do not check."""
    body: BundleBody = {
        "schema_version": SCHEMA_VERSION,
        "created": created,
        "ttlctl_version": ttlctl_version,
        "fit": fit.copy(),
        "profile": profile.copy(),
        "policy": params.to_json(),
        "provenance": (provenance or {}).copy(),
    }
    if router is not None:
        body["router"] = {**router, "settings": dict(router["settings"])}
    doc: Bundle = {**body, "sha256": checksum(body)}
    verify(doc)
    return doc


def assemble(
    fit: FitDoc,
    profile: ProfileDoc,
    params: PolicyParams,
    provenance: Provenance,
    router: RouterDoc | None = None,
) -> Bundle:
    """A sealed bundle made now by this ttlctl: :func:`build` stamped with the time
    (UTC, seconds) and ``ttlctl.__version__``. Every command that writes a bundle
    (``bundle build``, ``tune``, a live trial, ``validate``'s cold start) calls this."""
    return build(
        fit,
        profile,
        params,
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        ttlctl_version=__version__,
        provenance=provenance,
        router=router,
    )


@dataclass(frozen=True, slots=True)
class BuildRequest:
    """What ``ttlctl bundle build`` was asked: a fit file, a profile (a shipped name or
    a file) and the policy's knobs (None: the fit's η, clamped, and the fit's K)."""

    fit: Path
    profile: str
    eta: float | None = None
    k: int | None = None
    t_window: int = 100
    valve: str = DEFAULT_VALVE
    pin_cap: float = 1.0
    cold_start_ttl_s: float | None = None
    learn_eta: bool = False


#: the knobs of :class:`BuildRequest` as ``ttlctl bundle build`` spells them
_FLAG_OF = {
    "eta": "--eta",
    "k": "--k",
    "t_window": "--t-window",
    "valve": "--valve",
    "pin_cap": "--pin-cap",
    "cold_start_ttl_s": "--cold-start-ttl-seconds",
}
_KNOB = re.compile(r"\b(?:" + "|".join(_FLAG_OF) + r")\b")


def from_files(req: BuildRequest) -> Bundle:
    """The sealed bundle of a fit file, a profile and the policy's knobs, with the
    files' hashes as provenance. A bad file or knob is a :class:`BundleError` (the
    message names the file, or the knob and its range)."""
    fit_doc = read_fit(req.fit)
    prof, prof_path = resolve(req.profile)
    try:
        params = PolicyParams(
            eta=eta_from_fit(fit_doc) if req.eta is None else req.eta,
            k=req.k if req.k is not None else int(fit_doc.get("k", 100)),
            t_window=req.t_window,
            valve=req.valve,
            pin_cap=req.pin_cap,
            cold_start_ttl_s=req.cold_start_ttl_s,
            learn_eta=req.learn_eta,
        )
    except ValueError as exc:  # PolicyParams states its ranges as ValueErrors
        said = _KNOB.sub(lambda m: _FLAG_OF[m.group(0)], str(exc))
        raise BundleError(said) from None
    return assemble(
        fit_doc,
        prof.to_json(),
        params,
        {
            "fit": {"path": str(req.fit), "sha256": file_sha256(req.fit)},
            "profile": {"path": str(prof_path), "sha256": file_sha256(prof_path)},
            "trace": fit_doc.get("input", {}),
            "eta_fitted": eta_fitted(fit_doc),
        },
    )


def empty_fit() -> FitDoc:
    """The fit of a bundle that has none: the policy starts cold and learns online."""
    return {"schema": FIT_SCHEMA, "tools": {}, "global": None}


def cold_start(profile: ProfileDoc, made_by: str) -> Bundle:
    """A sealed bundle with no fit (the policy starts cold and learns online), the
    default policy and ``profile``; ``made_by`` says who made it and why."""
    return assemble(empty_fit(), profile, PolicyParams(), {"made_by": made_by})


def write(doc: Bundle, path: Path) -> None:
    """Write atomically: the file is whole or absent, never half-written."""
    write_json(doc, path)
