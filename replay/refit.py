"""``ttlctl refit``: production traffic (an engine log, or any trace) → the next bundle.

From the log and the bundle in service:

1. **ingest** the log with :func:`ttlctl.ingest.pipeline.ingest` (the same readers and
   bad-input rules as ``ttlctl ingest``; programs still in flight are counted);
2. **fit** it with the fit settings recorded in the served bundle's fit (K, ``abandon_s``,
   bootstrap, seed, CDF points; a bundle without a fit gives K and ``abandon_s`` from its
   policy);
3. **rebuild** a bundle with the served bundle's policy parameters and profile: only the
   fit changes; the provenance names the served bundle (path and sha256) and the log
   files (paths and sha256);
4. **replay** both bundles (``continuum``) and stock vLLM on the log's programs, on
   held-back seeds, as the tuner's judge does (:func:`replay.tune.judge.replay_held_back`),
   on an engine sized like the server that wrote the log (its facts in the log; flags
   win: :mod:`replay.refit_sizing`); the logs of several replicas replay as the fleet
   they came from, each replica at its own size, every call where it ran
   (:mod:`replay.refit_replay`);
5. **judge** with the tuner's guard (:func:`replay.tune.guard.guard`, ``baseline="old"``):
   the new bundle replaces the served one only when its mean JCT is strictly lower (a
   tie keeps the served bundle), and the replacement is atomic (the engine plugin
   reloads a changed file, :mod:`ttlctl.engine.watch`);
6. **report** what changed (:mod:`replay.refit_changes`): per-tool pause statistics and
   τ* old against new, and the replayed JCT under old, new and stock vLLM.

What it fits and replays with: :mod:`replay.refit_settings`.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from fitting.eta import fitted as eta_fitted
from fitting.fit import fit_trace
from fitting.fit_doc import FitDoc, FitSource
from fitting.policy_params import PolicyParams
from replay.policies import PolicySpec
from replay.progress import RunsDone
from replay.refit_changes import CONTEXTS, jct_table, tool_changes
from replay.refit_replay import engines_doc, plan
from replay.refit_replay import replay as replay_part
from replay.refit_settings import RefitSettings, fit_config, replay_settings
from replay.tune.context import load_json
from replay.tune.guard import guard
from replay.tune.judge import held_figures
from ttlctl import __version__, bundle_doc, bundle_history, bundle_make
from ttlctl import bundle as bundle_mod
from ttlctl.errors import TtlctlError
from ttlctl.ingest.ingest_report import IngestReport
from ttlctl.ingest.pipeline import ingest, rejects_path_for
from ttlctl.jsonio import FileRef, file_sha256, replacing
from ttlctl.nouns import counted
from ttlctl.trace import io as trace_io

REFIT_SCHEMA = "ttlctl.refit/1"
#: rejected records shown in the report (all of them are in the rejects file)
REJECTS_SHOWN = 5


class RefitError(TtlctlError, ValueError):
    """A refit that cannot go on (one line)."""


def refit(
    paths: Sequence[Path],
    bundle_path: Path,
    settings: RefitSettings,
    *,
    output: Path | None = None,
    dry_run: bool = False,
    stage: Callable[[str], None] | None = None,
    replays_done: RunsDone | None = None,
) -> dict[str, Any]:
    """Refit, judge, and (unless ``dry_run``) write the new bundle over ``bundle_path`` (or
    to ``output``) when the guard says so. Returns the report (schema ``ttlctl.refit/1``).
    ``stage`` is told each step as it starts; ``replays_done`` the replays done of all."""
    say = stage or (lambda _text: None)
    served_sha = file_sha256(bundle_path)  # first: a change after it is caught below
    old = bundle_mod.read(bundle_path)
    say("reading the log")
    with tempfile.TemporaryDirectory(prefix="ttlctl-refit-") as tmp:
        trace_path = settings.trace or Path(tmp) / "trace.parquet"
        report = ingest(paths, trace_path, fmt=settings.fmt, skip_bad=settings.skip_bad)
        rejects = _first_rejects(report)
        frame = trace_io.read(trace_path)
        kept_rejects = _keep_rejects(report, settings, bundle_path, dry_run)
    brief = _ingest_brief(report, frame, settings.trace, kept_rejects)
    if frame.height == 0:
        raise RefitError(f"{_names(paths)}: no calls left to refit from (all rejected)")
    logs: list[FileRef] = [
        {"path": f.path, "sha256": file_sha256(Path(f.path))} for f in report.files
    ]
    config = fit_config(old)
    say("fitting")
    fit = fit_trace(
        frame,
        config,
        source=_log_source(logs),
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        ttlctl_version=__version__,
    )
    params = PolicyParams.from_json(old["policy"])
    draft: bundle_doc.BundleParts = {
        "fit": fit,
        "profile": old["profile"],
        "policy": params.to_json(),
    }
    replay_config, recorded_from = replay_settings(old, settings)
    part = plan(frame, report.engines, settings, replay_config, recorded_from, fit, old["profile"])
    for sized in part.engines:
        say(sized.line)
    ctx = part.ctx
    specs = {
        "old": PolicySpec("continuum", bundle=old),
        "new": PolicySpec("continuum", bundle=draft),
        "vllm": PolicySpec("vllm"),
    }
    fleet = "" if ctx.fleet is None else f" on {counted(ctx.fleet.replicas, 'replica')} as logged"
    say(f"replaying old, new and stock vLLM{fleet} ({len(ctx.replays())} replays each)")
    replays = replay_part(part, specs, replays_done)
    held = (
        held_figures(ctx, replays.by, replays.p95, ("old", "vllm"), "old", candidate="new")
        | replays.refused()
    )
    engines = engines_doc(part)
    # -o elsewhere: the verdict names that file, not the served bundle, as what it writes
    elsewhere = None if output is None or output.resolve() == bundle_path.resolve() else output
    verdict = guard(
        held,
        settings.force,
        baseline="old",
        elsewhere=None if elsewhere is None else str(elsewhere),
        dry_run=dry_run,
    )
    replay_doc = {
        "loads": [load_json(t) for t in ctx.loads],
        "load_source": part.load_source,
        "seeds": list(settings.seeds),
        "engine": ctx.config.engine.to_json(),
        "offload_tokens": replay_config.offload_tokens,
        "truncate": replay_config.truncate,
        "client_tags": replay_config.client_tags,
        "settings_from": recorded_from,
        "engines": engines,
        # the logs of several replicas: the fleet replayed (its router: as-logged)
        "fleet": None if ctx.fleet is None else ctx.fleet.describe(),
    }
    provenance = _carried(old["provenance"])
    provenance["refit"] = {
        "previous_bundle": {"path": str(bundle_path), "sha256": old["sha256"]},
        "logs": logs,
        "ingest": brief,
        "replay": replay_doc,
        "held_back": held,
        "guard": verdict,
    }
    provenance["ttlctl_version"] = __version__
    # the policy is the one tuned behind the served bundle's router: it keeps that router
    new = bundle_make.assemble(fit, old["profile"], params, provenance, old.get("router"))
    target = output or bundle_path
    action, kept = _apply(new, verdict, target, bundle_path, served_sha, dry_run)
    return {
        "schema": REFIT_SCHEMA,
        "bundle": {"path": str(bundle_path), "sha256": old["sha256"]},
        "logs": logs,
        "ingest": brief | {"rejects_shown": rejects},
        "fit": {
            "config": fit["config"],
            "old": _fit_brief(old["fit"]),
            "new": _fit_brief(fit),
            "policy_eta": params.eta,
        },
        "contexts": list(CONTEXTS),
        "queue_delay_s": settings.queue_delay_s,
        "tools": tool_changes(
            old, new, CONTEXTS, settings.queue_delay_s, ctx.config.engine.max_num_batched_tokens
        ),
        "replay": replay_doc
        | {
            "programs": part.programs,
            "calls": ctx.workload.calls,
        },
        "sizing": {
            "lines": [s.line for s in part.engines],
            "notes": [note for s in part.engines for note in s.notes],
        },
        "held_back": held,
        "jct": jct_table(held),
        "guard": verdict,
        "action": action,
        "dry_run": dry_run,
        "target": str(target),
        "previous_kept": None if kept is None else str(kept),
        "new_bundle_sha256": new["sha256"],
    }


def _carried(old: bundle_doc.Provenance) -> bundle_doc.Provenance:
    """What the served bundle's provenance says that still describes the new one: its
    tuning study and its profile file."""
    kept: bundle_doc.Provenance = {}
    if "tuning" in old:
        kept["tuning"] = old["tuning"]
    if "profile" in old:
        kept["profile"] = old["profile"]
    return kept


def _apply(
    new: bundle_doc.Bundle,
    verdict: Mapping[str, Any],
    target: Path,
    served: Path,
    served_sha: str,
    dry_run: bool,
) -> tuple[str, Path | None]:
    """Write the new bundle when the guard ships it: ``replaced``, ``written`` (to -o),
    ``kept``, or with ``dry_run`` ``would replace`` / ``would write``; and where the
    bundle it replaced was kept (:mod:`ttlctl.bundle_history`), if it replaced one."""
    if verdict["shipped"] != "new":
        return "kept", None
    replacing = target.resolve() == served.resolve()
    if dry_run:
        return ("would replace" if replacing else "would write"), None
    if replacing and file_sha256(served) != served_sha:
        raise RefitError(
            f"{served}: the served bundle changed while the refit ran; nothing written "
            "(run the refit again)"
        )
    # atomic: the engine reads the old file or the new one; the old one is kept beside it
    kept = bundle_history.replace(new, target)
    return ("replaced" if replacing else "written"), kept


def _log_source(logs: Sequence[FileRef]) -> FitSource:
    """The fit's ``input``: the log file and its SHA-256; for several files, their paths
    and the SHA-256 of their SHA-256s (hex, in the order read)."""
    if len(logs) == 1:
        return {"path": logs[0]["path"], "sha256": logs[0]["sha256"]}
    digest = hashlib.sha256("".join(log["sha256"] for log in logs).encode()).hexdigest()
    return {"path": ", ".join(log["path"] for log in logs), "sha256": digest}


def _keep_rejects(
    report: IngestReport, settings: RefitSettings, bundle_path: Path, dry_run: bool
) -> Path | None:
    """Where the rejects of ``--skip-bad`` are kept: beside the trace given with ``--trace``
    (where ingest wrote them), else beside the served bundle (``<bundle>.rejects.jsonl``,
    replaced by each refit); none in a dry run without ``--trace`` (it writes no file)."""
    if report.rejects_path is None:
        return None
    if settings.trace is not None:
        return Path(report.rejects_path)
    if dry_run:
        return None
    kept = rejects_path_for(bundle_path)
    with replacing(kept) as tmp:
        shutil.copyfile(report.rejects_path, tmp)
    return kept


def _ingest_brief(
    report: IngestReport, frame: pl.DataFrame, trace: Path | None, rejects: Path | None
) -> dict[str, Any]:
    """The ingest's counts, and the files kept: the trace (``--trace``) and the rejects."""
    return {
        "files": len(report.files),
        "formats": report.formats(),
        "records": report.records,
        "calls": report.rows,
        "programs": int(frame["program_id"].n_unique()),
        "in_flight": report.in_flight,
        "rejected": report.rejected,
        "rejected_by_reason": report.rejected_by_reason,
        "rejects_path": None if rejects is None else str(rejects),
        "trace": None if trace is None else str(trace),
    }


def _first_rejects(report: IngestReport) -> list[dict[str, Any]]:
    """The first few rejected records (file, record, reason), read before the rejects file
    goes with the temporary folder."""
    if not report.rejects_path or not report.rejected:
        return []
    shown = []
    with open(report.rejects_path, encoding="utf-8") as fh:
        for line in fh:
            item = json.loads(line)
            shown.append({k: item.get(k) for k in ("file", "record", "reason")})
            if len(shown) == REJECTS_SHOWN:
                break
    return shown


def _fit_brief(fit: FitDoc) -> dict[str, Any]:
    inp = fit.get("input")
    return {
        "programs": inp.get("programs") if inp else None,
        "calls": inp.get("calls") if inp else None,
        "pauses": inp.get("pauses") if inp else None,
        "eta": eta_fitted(fit),
        "k": fit.get("k"),
    }


def _names(paths: Sequence[Path]) -> str:
    return ", ".join(str(p) for p in paths)
