"""The run directory as the report reads it: which of its files are there, each one loaded
(a damaged file is a problem the page shows, not an error), and what the sections ask of
them (the policy's τ*, the replay's results, the tools by sample count)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import polars as pl

from fitting.fit_doc import FitDoc, ToolFit
from fitting.policy import Decision, TTLPolicy
from replay.figures import PolicyResult, ReplayDoc
from ttlctl import bundle as bundle_mod
from ttlctl import bundle_doc, filekind
from ttlctl.jsonfile import read_json_object
from ttlctl.jsonio import file_sha256, names_file
from ttlctl.report import files
from ttlctl.report.files import BUNDLE, FILES, SUMMARY, ReportError
from ttlctl.report.markup import is_num
from ttlctl.summary_name import SUMMARY_FAMILY
from ttlctl.trace import io as trace_io

#: the most frequent tools get a plot (and their own τ* curve)
MAX_TOOL_PLOTS = 12


@dataclass
class RunInputs:
    """What a run directory holds; None where a file is absent or unreadable (its
    problem in ``problems``, by role: :data:`~ttlctl.report.files.FILES`)."""

    root: Path
    #: each role's file name (:func:`ttlctl.report.files.names`: b2.json and b2.tune.json
    #: where the bundle reported is b2.json)
    names: dict[str, str] = field(default_factory=lambda: {role: role for role in FILES})
    #: the roles' files that are there
    paths: dict[str, Path] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    #: files read but not shown, by role, with why (a tune.json of another bundle:
    #: :func:`other_bundle`)
    set_aside: dict[str, str] = field(default_factory=dict)
    #: files shown, with what they do not share with the run, by role (a replay.json of
    #: another trace or bundle: :func:`other_replay`)
    caveats: dict[str, str] = field(default_factory=dict)
    trace: pl.DataFrame | None = None
    fit: FitDoc | None = None
    #: where the fit came from: fit.json, or the bundle's own fit (``b2.json (its fit)``)
    fit_source: str = "fit.json"
    bundle: bundle_doc.Bundle | None = None
    policy: TTLPolicy | None = None
    replay: ReplayDoc | None = None
    #: the bundle's summary (``ttlctl tune``'s: tune.json, b2.tune.json), read as it is
    tune: dict[str, Any] | None = None
    #: the serving engine's step budget (vLLM's ``max_num_batched_tokens``) B is priced in;
    #: None: the budget the bundle's profile was measured with
    #: (:func:`ttlctl.bundle.policy_from`)
    engine_budget: int | None = None

    @property
    def queue_delay_s(self) -> float:
        """T for the τ* shown: continuum's mean queueing delay in the replay, else 0."""
        for r in self.results():
            if r.get("policy") == "continuum":
                value = r.get("queue_mean_s")
                if value is not None and is_num(value) and math.isfinite(value) and value >= 0:
                    return float(value)
        return 0.0

    def results(self) -> list[PolicyResult]:
        """The replay's results (the entries that are objects: a replay.json may be edited)."""
        results = (self.replay.get("results") if self.replay is not None else None) or []
        return [r for r in results if isinstance(r, dict)]

    def decide(self, tool: str | None, context: float, t: float) -> Decision:
        """The bundle's τ* for ``tool`` at ``context`` tokens with T = ``t``, no offload."""
        assert self.policy is not None
        return self.policy.decide(tool, context, queue_delay_s=t)


def ranked_tools(fit: FitDoc) -> list[tuple[str, ToolFit]]:
    """The fit's tools, most pauses first (then by name)."""
    tools = fit.get("tools") or {}
    entries = [(str(k), v) for k, v in tools.items() if isinstance(v, dict)]
    return sorted(entries, key=lambda kv: (-int(kv[1].get("n") or 0), kv[0]))


def _read(run: RunInputs, role: str, path: Path) -> None:
    if role == "trace.parquet":
        run.trace = trace_io.read(path)
    elif role == "fit.json":
        run.fit = bundle_mod.read_fit(path)
    elif role == BUNDLE:
        run.bundle = bundle_mod.read(path)
    elif role == "replay.json":
        # as `ttlctl replay --json` writes it; the sections read it defensively
        run.replay = cast(
            ReplayDoc, _replay_results(read_json_object(path, filekind.REPLAY_RESULTS))
        )
    elif role == SUMMARY:
        run.tune = _tune_summary(read_json_object(path, filekind.TUNE_SUMMARY))


def _replay_results(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` when it may be ``ttlctl replay --json``'s results; ValueError when it is
    another of ttlctl's documents (a fit, a bundle, tune's summary copied in as
    replay.json), which the page would otherwise list as read and holding no results."""
    wrong = filekind.mistaken(doc, filekind.REPLAY_RESULTS, "a replay's results")
    if wrong is not None:
        raise ValueError(wrong)
    results = doc.get("results")
    if results is not None and not isinstance(results, list):
        raise ValueError(f"results is {type(results).__name__}, not a list (one entry per policy)")
    for i, result in enumerate(results or []):
        problem = _figure_problem(result) if isinstance(result, dict) else "not an object"
        if problem is not None:
            raise ValueError(f"results[{i}]{problem}")
    return doc


#: the figures of a replay's result the page draws or tabulates: seconds and counts are
#: numbers >= 0, the hit rate a share (gap closed is a share too, and may be negative: a
#: policy slower than stock vLLM)
_AT_LEAST_ZERO = (
    "jct_mean_s", "jct_p50_s", "jct_p95_s", "jct_p99_s", "ttft_mean_s", "ttft_p95_s",
    "queue_mean_s", "preemptions", "pinned_token_seconds", "llm_calls", "programs",
)  # fmt: skip


def _figure_problem(result: dict[str, Any]) -> str | None:
    """What is wrong with a figure of one result (None: nothing): a value the page would
    show as it is, "abc" or -1.00, where ``ttlctl replay`` writes none such."""
    checks = [(key, 0.0, math.inf) for key in _AT_LEAST_ZERO]
    checks += [("prefix_hit_rate", 0.0, 1.0), ("gap_closed", -math.inf, math.inf)]
    for key, low, high in checks:
        value = result.get(key)
        if value is None:
            continue
        if not is_num(value) or not math.isfinite(value) or not low <= value <= high:
            return f".{key} is {json.dumps(value)}: not what `ttlctl replay` writes (edited?)"
    return None


def _tune_summary(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` when it may be ``ttlctl tune``'s summary (schema ``ttlctl.tune/…``, or none:
    read as it is); ValueError when it is a bundle (``tune -o run/tune.json`` writes one
    there) or another ttlctl document."""
    wrong = filekind.mistaken(doc, filekind.TUNE_SUMMARY, "tune's summary")
    if wrong is not None:  # tune -o run/tune.json writes a bundle there
        bundle = filekind.document_kind(doc) == filekind.BUNDLE
        hint = " (a bundle's summary is NAME.tune.json)" if bundle else ""
        raise ValueError(wrong + hint)
    schema = doc.get("schema")
    if schema is not None and not (isinstance(schema, str) and schema.startswith(SUMMARY_FAMILY)):
        raise ValueError(f"not tune's summary: schema {json.dumps(schema)}")
    return doc


def _unnamed(root: Path) -> str:
    """A hint for a folder whose JSON files go by other names: a bundle among them is read
    when named (``--bundle``; one found by its summary beside it needs no name)."""
    found = sorted(p.name for p in root.glob("*.json") if p.is_file())
    if not found:
        return ""
    shown = found[:3] + ([f"{len(found) - 3} more"] if len(found) > 3 else [])
    return f" (a bundle under another name is read with --bundle NAME: {', '.join(shown)})"


def load(
    root: Path, max_num_batched_tokens: int | None = None, bundle: str | None = None
) -> RunInputs:
    """Read each role's file found in ``root`` (:func:`ttlctl.report.files.names`: the
    bundle ``bundle``, or the one ``root`` holds, with its summary); :class:`ReportError`
    when ``root`` holds none of them, when the bundle ``bundle`` names cannot be read as
    one, or as :func:`~ttlctl.report.files.names` says (another file that cannot be read
    is a note on the page). The
    bundle's policy prices a miss in steps of ``max_num_batched_tokens`` (the serving
    engine's budget; None: the one the bundle's profile was measured with), as
    :func:`ttlctl.bundle.policy_from` does."""
    run = RunInputs(root, names=files.names(root, bundle), engine_budget=max_num_batched_tokens)
    run.paths = {role: root / name for role, name in run.names.items() if (root / name).is_file()}
    for role, name in run.names.items():
        if role not in run.paths and (root / name).exists():  # a folder, say, of that name
            kind = "a folder" if (root / name).is_dir() else "not a regular file"
            run.problems[role] = f"{root / name} is {kind}, not a file to read"
    if not run.paths:
        raise ReportError(f"{root}: none of {', '.join(FILES)}; nothing to report" + _unnamed(root))
    for role, path in run.paths.items():
        try:
            _read(run, role, path)
        except Exception as exc:  # a damaged input is a note in the page, not a crash
            run.problems[role] = (str(exc).splitlines() or [type(exc).__name__])[0]
    if bundle is not None and BUNDLE in run.problems:
        # the one input named on the command line: refused, not a note
        raise ReportError(f"--bundle: {run.problems[BUNDLE]}")  # the problem names the file
    if run.bundle is not None:
        try:
            run.policy = bundle_mod.policy_from(run.bundle, max_num_batched_tokens)
        except Exception as exc:
            run.problems[BUNDLE] = f"no policy: {exc}"
        if run.fit is None and isinstance(run.bundle.get("fit"), dict):
            run.fit, run.fit_source = run.bundle["fit"], f"{run.names[BUNDLE]} (its fit)"
        other = other_bundle(run.tune, run.bundle, run.paths[BUNDLE])
        if other is not None:
            run.set_aside[SUMMARY] = other
            run.tune = None
    caveat = other_replay(run)
    if caveat is not None:
        run.caveats["replay.json"] = caveat
    return run


def other_replay(run: RunInputs) -> str | None:
    """What ``run``'s replay.json was made from that is not the run's own trace.parquet or
    bundle (its recorded hash is another's: a replay of the built bundle before tune
    replaced it, or one copied in from another run), or None. It is still shown (stock
    vLLM's row does not depend on the bundle); the page and a warning say so."""
    if run.replay is None:
        return None
    others = []
    trace = run.paths.get("trace.parquet")
    own_trace = file_sha256(trace) if trace is not None and run.trace is not None else None
    if names_file(run.replay.get("trace"), own_trace) is False:
        others.append(f"another trace ({_recorded(run.replay.get('trace'))})")
    ref = run.replay.get("bundle")
    sha = ref.get("sha256") if isinstance(ref, dict) else None
    if run.bundle is not None and isinstance(sha, str):
        own = {run.bundle.get("sha256"), file_sha256(run.paths[BUNDLE])}
        if sha not in own:
            others.append(f"another bundle ({_recorded(ref)}) than {run.names[BUNDLE]}")
    if not others:
        return None
    return (
        f"made from {' and '.join(others)}: its figures are not this run's "
        "(`ttlctl replay … --json` again writes this run's)"
    )


def _recorded(ref: Any) -> str:
    """A document's record of a file, as a warning names it: its path and hash."""
    ref = ref if isinstance(ref, dict) else {}
    return f"{ref.get('path')}, sha256 {str(ref.get('sha256'))[:12]}…"


def other_bundle(tune: dict[str, Any] | None, bundle: bundle_doc.Bundle, path: Path) -> str | None:
    """Why ``tune`` is not the summary of ``bundle``, read at ``path`` (its
    ``bundle.sha256`` is another's: a later study wrote it, or it was copied in, or the
    bundle was replaced since, as refit does in place), or None when it is, or says
    nothing of its bundle."""
    ref = tune.get("bundle") if tune is not None else None
    sha = ref.get("sha256") if isinstance(ref, dict) else None
    if not isinstance(sha, str) or sha == bundle.get("sha256"):
        return None
    assert isinstance(ref, dict)
    now = f"sha256 {str(bundle.get('sha256'))[:12]}…"
    if _same_file(ref.get("path"), path):
        return (
            f"the summary of an earlier {path.name} (sha256 {sha[:12]}…): {path.name} was "
            f"replaced since (by refit, a rollback or another build), {now}"
        )
    return (
        f"the summary of another bundle ({ref.get('path')}, sha256 {sha[:12]}…), "
        f"not of {path.name} ({now})"
    )


def _same_file(named: Any, path: Path) -> bool:
    """Whether ``named`` (a path as tune.json records it) is ``path``."""
    if not isinstance(named, str):
        return False
    try:
        return Path(named).resolve() == path.resolve()
    except (OSError, RuntimeError, ValueError):
        return False
