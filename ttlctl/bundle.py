"""The policy bundle: one JSON document a vLLM scheduler plugin loads at runtime.

Fields (docs/bundle.md): ``schema_version``, ``created``, ``ttlctl_version``, ``fit``
(per-tool CDFs, global CDF, η), ``profile`` (what rebuilding a context costs),
``policy`` (η, K, T window, valve, pin cap …), ``provenance`` (input hashes,
tuning summary) and ``sha256``: the SHA-256 of the canonical JSON of every other
field (keys sorted, no spaces, UTF-8). Any edit, truncation or schema mismatch
is caught by :func:`verify`.

Standard library only (with :mod:`fitting.policy` and :mod:`profiles.schema`):
the engine process imports this module, so it must not pull in numpy, polars
or torch.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import Any, NotRequired, TypedDict, cast

from fitting import FIT_SCHEMA
from fitting.eta import fitted as eta_fitted
from fitting.eta import from_fit as eta_from_fit
from fitting.fit_doc import FitDoc, FitInput
from fitting.policy import DEFAULT_VALVE, PolicyDoc, PolicyParams, TTLPolicy, priors_from_fit
from profiles import schema as profile_schema
from profiles.schema import ProfileDoc
from profiles.shipped import resolve
from ttlctl import __version__
from ttlctl.errors import TtlctlError
from ttlctl.jsonio import FileRef, file_sha256, write_json
from ttlctl.router_doc import check_settings

SCHEMA_VERSION = 1
MAX_CDF_POINTS = 1024
REQUIRED = (
    "schema_version",
    "created",
    "ttlctl_version",
    "fit",
    "profile",
    "policy",
    "provenance",
    "sha256",
)


class BundleError(TtlctlError, ValueError):
    """A bundle that must not be used; the message says why (one line)."""


class BundleParts(TypedDict):
    """What a policy is made from: the fit, the profile and the policy's parameters
    (:func:`policy_from`; a replay's ``continuum`` runs from these alone)."""

    fit: FitDoc
    profile: ProfileDoc
    policy: PolicyDoc


class Provenance(TypedDict, total=False):
    """What a bundle was made from. Each maker writes the keys it knows (a reader must
    expect any of them to be absent, and keys of other makers to be present)."""

    #: ``bundle build``, ``tune``: the fit and the profile files
    fit: FileRef
    profile: FileRef
    #: ``bundle build``: the fit's ``input`` ({} if it has none); ``tune``: the trace file
    trace: FitInput | FileRef | Mapping[str, object]
    #: ``tune``: the fit's ``input`` ({} if it has none)
    trace_fitted: FitInput | Mapping[str, object]
    #: the η the fit estimated (the policy's may differ)
    eta_fitted: float | None
    #: ``tune``: the study (``replay.tune.provenance_of``: tune.json without its trials)
    tuning: dict[str, Any]
    #: ``refit``: the bundle it replaced, the logs, the replays and the guard's verdict
    refit: dict[str, Any]
    ttlctl_version: str
    #: a bundle made for a run (``replay --backend vllm``, ``validate``'s cold start)
    made_by: str


class RouterDoc(TypedDict):
    """The router a bundle was tuned behind (``tune --replicas N``): its ttlctl name
    (``replay.fleet.routers``), its settings by vllm-router's names with underscores
    (defaults filled in) and the replicas it routed to."""

    name: str
    settings: dict[str, float | int | str | None]
    replicas: int


class BundleBody(BundleParts):
    """A bundle without its checksum: what :data:`Bundle`'s ``sha256`` covers."""

    schema_version: int
    created: str
    ttlctl_version: str
    provenance: Provenance
    #: optional: the router and settings the policy was tuned behind (old bundles lack it)
    router: NotRequired[RouterDoc]


class Bundle(BundleBody):
    """The bundle document (``bundle.json``), sealed: ``sha256`` of the canonical JSON of
    every other field (:func:`canonical_bytes`)."""

    sha256: str


def canonical_bytes(doc: Mapping[str, Any]) -> bytes:
    """The bytes the checksum covers: every field but ``sha256``, canonical JSON."""
    body = {k: v for k, v in doc.items() if k != "sha256"}
    return json.dumps(
        body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def checksum(doc: Mapping[str, Any]) -> str:
    """The ``sha256`` a sealed ``doc`` carries (hex)."""
    return hashlib.sha256(canonical_bytes(doc)).hexdigest()


def seal(doc: Mapping[str, Any]) -> dict[str, Any]:
    """Any document with ``sha256`` set to :func:`checksum` (what :func:`build` seals
    with; it does not check the document, so a test can seal a damaged one)."""
    out = {k: v for k, v in doc.items() if k != "sha256"}
    out["sha256"] = checksum(out)
    return out


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


def _load_json(path: Path, hint: str = "") -> Any:
    """The JSON value in ``path``; :class:`BundleError` names the file and the problem
    (``hint`` follows the message of a file that is not JSON)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise BundleError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise BundleError(f"{path}: is a directory") from None
    except OSError as exc:
        raise BundleError(f"{path}: cannot read ({(exc.strerror or str(exc)).lower()})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise BundleError(
            f"{path}: line {line}: not UTF-8 text (byte {exc.start}){hint or '; damaged?'}"
        ) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BundleError(f"{path}: line {exc.lineno}: not valid JSON ({exc.msg}){hint}") from None


def read(path: Path, *, router_settings: bool = True) -> Bundle:
    """Load and verify; :class:`BundleError` names the file and the problem.
    ``router_settings=False``: the router section's settings are not typed against the
    router's flags (the engine's read: it serves the policy and never uses them)."""
    doc = _load_json(path, "; truncated or edited?")
    try:
        verify(doc, router_settings=router_settings)
    except BundleError as exc:
        raise BundleError(f"{path}: {exc}") from None
    return cast(Bundle, doc)  # verified: the keys, the checksum, the fit, profile and policy


def read_fit(path: Path) -> FitDoc:
    """A fit document (``ttlctl fit``'s ``fit.json``) to build a bundle from, its CDFs
    checked as a bundle's are; :class:`BundleError` names the file and the problem."""
    doc = _load_json(path)
    if not isinstance(doc, dict):
        raise BundleError(f"{path}: not a JSON object")
    try:
        _check_fit(doc)
    except BundleError as exc:
        raise BundleError(f"{path}: {exc}") from None
    return cast(FitDoc, doc)  # checked: the schema, and every CDF


def verify(doc: Any, *, router_settings: bool = True) -> None:
    """Raise :class:`BundleError` on any damage, edit, foreign document or bad content;
    ``router_settings=False`` leaves the router section's settings untyped (:func:`read`)."""
    if not isinstance(doc, dict):
        raise BundleError("not a ttlctl bundle (not a JSON object)")
    missing = [k for k in REQUIRED if k not in doc]
    if missing:
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
    _check_fit(doc["fit"])
    policy = doc["policy"]
    if not isinstance(policy, dict):
        raise BundleError("policy must be an object")
    absent = [name for name in PolicyParams.__dataclass_fields__ if name not in policy]
    if absent:  # a bundle states every parameter: none is left to a default
        raise BundleError(f"policy: missing {', '.join(absent)}")
    try:
        profile_schema.from_json(doc["profile"], "profile")
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


def _check_fit(fit: Any) -> None:
    if not isinstance(fit, dict) or fit.get("schema") != FIT_SCHEMA:
        raise BundleError(f"fit: schema is not {FIT_SCHEMA!r}")
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


def policy_from(doc: BundleParts, chunk: int | None = None) -> TTLPolicy:
    """The online policy a verified bundle describes.

    ``chunk``: the step budget of the engine that serves it (vLLM's
    ``max_num_batched_tokens``). A miss is priced by the bundle's profile
    (:meth:`profiles.schema.Profile.rebuild_s`) in steps of it: a rebuild runs on that
    engine, so its budget, not the one the profile was measured with, sets how many
    steps (each paying its fixed cost) the prefill takes. None: the profile's
    measured budget (one step when it records none), for a bundle read with no engine.
    """
    params = PolicyParams.from_json(doc["policy"])
    profile = profile_schema.from_json(doc["profile"])
    tools, everything = priors_from_fit(doc["fit"])
    budget = chunk if chunk is not None and chunk > 0 else None
    return TTLPolicy.create(params, partial(profile.rebuild_s, chunk=budget), tools, everything)


def load_policy(
    path: Path | str | None, warn: Callable[[str], None], chunk: int | None = None
) -> tuple[TTLPolicy | None, Bundle | None]:
    """Engine side: the bundle's policy, or (None, None) = "no pin" after one warning.

    Never raises: a missing, damaged or foreign bundle must leave the engine
    serving as stock vLLM.
    """
    if path is None or str(path) == "":
        warn("ttlctl: no bundle given (TTLCTL_BUNDLE unset): serving as stock vLLM, no pins")
        return None, None
    try:
        return open_policy(Path(path), chunk)
    except BundleError as exc:
        warn(f"ttlctl: bundle refused, serving as stock vLLM with no pins: {exc}")
        return None, None


def open_policy(path: Path, chunk: int | None = None) -> tuple[TTLPolicy, Bundle]:
    """The policy of the bundle at ``path`` (for an engine of step budget ``chunk``,
    :func:`policy_from`) and the bundle; :class:`BundleError` (naming the file) for
    anything that keeps it from being served."""
    try:
        # the router's settings are the router's: one it would refuse costs no pin here
        doc = read(path, router_settings=False)
        return policy_from(doc, chunk), doc
    except BundleError:
        raise
    except (ValueError, KeyError, TypeError) as exc:
        raise BundleError(f"{path}: {exc}") from None


def router_of(doc: Bundle, path: Path | str) -> RouterDoc:
    """The router section of a bundle; :class:`BundleError` when it has none."""
    router = doc.get("router")
    if router is None:
        raise BundleError(
            f"{path}: no router section: the bundle was not tuned for a fleet "
            "(`ttlctl tune --replicas N --router R` records one)"
        )
    return router
