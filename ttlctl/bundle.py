"""Reading a bundle: the file to a verified document (:func:`read`), and the document to
the online policy it describes (:func:`policy_from`); the engine's door, which never
raises (:func:`load_policy`). What a bundle holds is :mod:`ttlctl.bundle_doc`, how it is
checked :mod:`ttlctl.bundle_check`, how it is made :mod:`ttlctl.bundle_make`.

Standard library only (with :mod:`fitting.policy` and :mod:`profiles.profile_read`): the
engine process imports this module, so it must not pull in numpy, polars or torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any, cast

from fitting.durations import priors_from_fit
from fitting.fit_doc import FitDoc
from fitting.policy import TTLPolicy
from fitting.policy_params import PolicyParams
from profiles import profile_read
from ttlctl.bundle_check import check_fit, verify
from ttlctl.bundle_doc import Bundle, BundleError, BundleParts, RouterDoc
from ttlctl.filekind import FIT, mistaken
from ttlctl.jsonfile import JsonFileError, read_json_object
from ttlctl.router_doc import KV_AWARE, ttlctl_name


def _load_json(path: Path, what: str, hint: str = "") -> dict[str, Any]:
    """The JSON object in ``path`` (:func:`ttlctl.jsonfile.read_json_object`);
    :class:`BundleError` names the file and the problem (``hint`` follows the message of a
    file whose bytes are not UTF-8 JSON)."""
    try:
        return read_json_object(path, what)
    except JsonFileError as exc:
        raise BundleError(f"{exc}{hint}" if exc.damaged else str(exc)) from None


def read(path: Path, *, router_settings: bool = True) -> Bundle:
    """Load and verify; :class:`BundleError` names the file and the problem.
    ``router_settings=False``: the router section's settings are not typed against the
    router's flags (the engine's read: it serves the policy and never uses them)."""
    doc = _load_json(path, "a bundle", "; truncated or edited?")
    try:
        verify(doc, router_settings=router_settings)
    except BundleError as exc:
        raise BundleError(f"{path}: {exc}") from None
    return cast(Bundle, doc)  # verified: the keys, the checksum, the fit, profile and policy


def read_fit(path: Path) -> FitDoc:
    """A fit document (``ttlctl fit``'s ``fit.json``) to build a bundle from, its CDFs
    checked as a bundle's are; :class:`BundleError` names the file and the problem."""
    doc = _load_json(path, "a fit")
    wrong = mistaken(doc, FIT, "a fit")  # a bundle, a profile … given as the fit
    if wrong is not None:
        raise BundleError(f"{path}: {wrong}")
    try:
        check_fit(doc)
    except BundleError as exc:
        raise BundleError(f"{path}: {exc}") from None
    return cast(FitDoc, doc)  # checked: the schema, and every CDF


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
    profile = profile_read.from_json(doc["profile"])
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


def tuned_prefix_credit(doc: Mapping[str, Any]) -> bool | None:
    """Whether the study that shipped ``doc`` behind ``kv-aware`` credited every call with
    its cached prefix (``tune --no-prefix-credit``: False); None where the bundle records no
    such study (built, or tuned behind another router)."""
    provenance = doc.get("provenance")
    tuning = provenance.get("tuning") if isinstance(provenance, Mapping) else None
    shipped = tuning.get("shipped") if isinstance(tuning, Mapping) else None
    router = shipped.get("router") if isinstance(shipped, Mapping) else None
    if not isinstance(router, Mapping) or ttlctl_name(str(router.get("name"))) != KV_AWARE:
        return None
    return router.get("prefix_credit") is not False


def router_of(doc: Bundle, path: Path | str) -> RouterDoc:
    """The router section of a bundle; :class:`BundleError` when it has none."""
    router = doc.get("router")
    if router is None:
        raise BundleError(
            f"{path}: no router section: the bundle was not tuned for a fleet "
            "(`ttlctl tune --replicas N --router R` records one)"
        )
    return router
