"""The check of a bundle document: every field present, the schema version, the seal,
and the content (the fit's CDFs, the profile, every policy parameter, the provenance and
the optional router section). :func:`verify` raises :class:`BundleError` saying why (one
line); :func:`check_fit` checks a fit's CDFs, K and η as a bundle's (``bundle build``'s
fit file).

Standard library only: the engine checks every bundle it reads.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from itertools import pairwise
from typing import Any

from fitting import FIT_SCHEMA
from fitting.eta import in_range as eta_in_range
from fitting.policy_params import PolicyParams
from profiles import profile_read
from ttlctl.bundle_doc import REQUIRED, SCHEMA_VERSION, BundleError, checksum
from ttlctl.errors import TtlctlError
from ttlctl.filekind import BUNDLE, FIT, document_kind, mistaken
from ttlctl.router_doc import check_settings

MAX_CDF_POINTS = 1024


def verify(doc: Any, *, router_settings: bool = True) -> None:
    """Raise :class:`BundleError` on any damage, edit, foreign document or bad content;
    ``router_settings=False`` leaves the router section's settings untyped
    (:func:`ttlctl.bundle.read`)."""
    if not isinstance(doc, dict):
        raise BundleError("not a ttlctl bundle (not a JSON object)")
    missing = [k for k in REQUIRED if k not in doc]
    if missing:
        kind = document_kind(doc)
        if kind == FIT:
            raise BundleError(
                f"not a ttlctl bundle but {kind}: `ttlctl bundle build --fit FIT --profile P "
                "-o bundle.json` makes a bundle from it"
            )
        wrong = mistaken(doc, BUNDLE, "a ttlctl bundle")
        if wrong is not None:
            raise BundleError(wrong)
        raise BundleError(f"not a ttlctl bundle: missing {', '.join(missing)}")
    if doc["schema_version"] != SCHEMA_VERSION:
        raise BundleError(
            f"bundle schema_version {doc['schema_version']!r} is not supported "
            f"(this ttlctl reads {SCHEMA_VERSION})"
        )
    try:
        expected = checksum(doc)
    except (TypeError, ValueError) as exc:
        raise BundleError(f"content cannot be checksummed: {exc}") from None
    if doc["sha256"] != expected:
        raise BundleError(
            "checksum mismatch: the bundle was edited or damaged after it was written"
        )
    check_fit(doc["fit"])
    policy = doc["policy"]
    if not isinstance(policy, dict):
        raise BundleError("policy must be an object")
    absent = [name for name in PolicyParams.__dataclass_fields__ if name not in policy]
    if absent:  # a bundle states every parameter: none is left to a default
        raise BundleError(f"policy: missing {', '.join(absent)}")
    try:
        profile_read.from_json(doc["profile"], "profile")
        PolicyParams.from_json(doc["policy"])
    except (ValueError, TypeError) as exc:
        raise BundleError(str(exc)) from None
    if not isinstance(doc["provenance"], dict):
        raise BundleError("provenance must be an object")
    if "router" in doc:
        _check_router(doc["router"], settings=router_settings)


def _check_router(router: Any, *, settings: bool) -> None:
    """The optional ``router`` section: a name, its settings (numbers, text, booleans or
    null: Program scheduling's config has all four), replicas; then, with ``settings``,
    each setting as its router's flag takes it (:func:`ttlctl.router_doc.check_settings`)."""
    ok = (
        isinstance(router, dict)
        and isinstance(router.get("name"), str)
        and isinstance(router.get("settings"), dict)
        and all(
            isinstance(k, str) and (v is None or isinstance(v, (int, float, str)))
            for k, v in router["settings"].items()
        )
        and isinstance(router.get("replicas"), int)
        and not isinstance(router.get("replicas"), bool)
        and router["replicas"] >= 1
    )
    if not ok:
        raise BundleError(
            "router must be an object with name (text), settings (numbers, text, booleans or "
            "null) and replicas (an integer >= 1)"
        )
    if not settings:
        return
    try:
        check_settings(router["name"], router["settings"])
    except TtlctlError as exc:
        raise BundleError(str(exc)) from None


def check_fit(fit: Any) -> None:
    """A fit document's schema, K, η and CDFs, as a bundle carries them."""
    if not isinstance(fit, dict) or fit.get("schema") != FIT_SCHEMA:
        raise BundleError(f"fit: schema is not {FIT_SCHEMA!r}")
    _check_k_and_eta(fit)
    tools = fit.get("tools")
    if not isinstance(tools, dict):
        raise BundleError("fit: tools must be an object")
    entries = [(f"tools[{name!r}]", t) for name, t in tools.items()]
    if fit.get("global") is not None:
        entries.append(("global", fit["global"]))
    for where, entry in entries:
        cdf = entry.get("cdf") if isinstance(entry, dict) else None
        if not isinstance(cdf, dict):
            raise BundleError(f"fit.{where}: missing cdf")
        _check_cdf(cdf, f"fit.{where}.cdf")
    # without it every tool's τ would fall back on the cold start; null only in the fit of
    # nothing (no tool: bundle_make.empty_fit, a cold-start bundle)
    if "global" not in fit or (fit["global"] is None and tools):
        raise BundleError("fit: missing global (the all-tools fit every fit document has)")


def _check_k_and_eta(fit: Mapping[str, Any]) -> None:
    """The fit's ``k`` (a count of samples) and ``eta.value`` (a correlation, or null),
    when present: a damaged value is refused, named as the document's field (not as the
    ``--k`` or ``--eta`` it stands in for, nor clamped into range)."""
    k = fit.get("k")
    if "k" in fit and (isinstance(k, bool) or not isinstance(k, int) or k < 0):
        raise BundleError(f"fit.k is {json.dumps(k)}; K counts samples: a whole number >= 0")
    eta = fit.get("eta")
    if eta is None:
        return
    if not isinstance(eta, dict):
        raise BundleError(f"fit.eta is {json.dumps(eta)[:40]}, not an object")
    value = eta.get("value")
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not eta_in_range(value):
        raise BundleError(
            f"fit.eta.value is {json.dumps(value)[:40]}; η is a correlation, in [-1, 1]"
        )


def _check_cdf(cdf: Mapping[str, Any], where: str) -> None:
    x, p, n = cdf.get("x"), cdf.get("p"), cdf.get("n")
    if not isinstance(x, list) or not isinstance(p, list) or not isinstance(n, int):
        raise BundleError(f"{where}: needs lists x, p and an integer n")
    if len(x) != len(p) or len(x) > MAX_CDF_POINTS:
        raise BundleError(f"{where}: x and p must have the same length, at most {MAX_CDF_POINTS}")
    if (n == 0) != (len(x) == 0) or n < 0:
        raise BundleError(f"{where}: n must be positive exactly when there are points")
    values = [*x, *p]
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
        raise BundleError(f"{where}: non-numeric or non-finite value")
    if any(b <= a for a, b in pairwise(x)) or (x and x[0] < 0):
        raise BundleError(f"{where}: x must be non-negative and strictly increasing")
    if any(b <= a for a, b in pairwise(p)) or (p and (p[0] <= 0 or p[-1] != 1)):
        raise BundleError(f"{where}: p must increase strictly to 1")
