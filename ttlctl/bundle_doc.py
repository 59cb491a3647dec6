"""The bundle document: its fields, typed, and its seal.

Fields (docs/bundle.md): ``schema_version``, ``created``, ``ttlctl_version``, ``fit``
(per-tool CDFs, global CDF, η), ``profile`` (what rebuilding a context costs),
``policy`` (η, K, T window, valve, pin cap …), ``provenance`` (input hashes,
tuning summary), an optional ``router`` and ``sha256``: the SHA-256 of the canonical
JSON of every other field (keys sorted, no spaces, UTF-8, :func:`canonical_bytes`).

:mod:`ttlctl.bundle_check` checks a document against these types, :mod:`ttlctl.bundle`
reads one from a file, :mod:`ttlctl.bundle_make` makes one. Standard library only (with
:mod:`fitting` and :mod:`profiles.schema`'s types): the engine process imports it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

from fitting.fit_doc import FitDoc, FitInput
from fitting.policy_params import PolicyDoc
from profiles.schema import ProfileDoc
from ttlctl.errors import TtlctlError
from ttlctl.jsonio import FileRef

SCHEMA_VERSION = 1
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
    (:func:`ttlctl.bundle.policy_from`; a replay's ``continuum`` runs from these alone)."""

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
    """Any document with ``sha256`` set to :func:`checksum` (what
    :func:`ttlctl.bundle_make.build` seals with; it does not check the document, so a test
    can seal a damaged one)."""
    out = {k: v for k, v in doc.items() if k != "sha256"}
    out["sha256"] = checksum(out)
    return out
