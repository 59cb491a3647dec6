"""The "Inputs" section: the run's files (read or not, size, SHA-256) and what each
document says it was made from, checked against the run's own files."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ttlctl import __version__
from ttlctl.jsonio import file_sha256, names_file
from ttlctl.report.files import BUNDLE, FILES, SUMMARY
from ttlctl.report.markup import e, table
from ttlctl.report.rundir import RunInputs


def _references(doc_name: str, doc: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``doc`` (and of its provenance) that may name a file."""
    entries = {"trace": doc.get("input")} if doc_name == "fit.json" else dict(doc)
    provenance = doc.get("provenance")
    if isinstance(provenance, dict):
        entries.update(provenance)
    return entries


def section(run: RunInputs) -> str:
    hashes: dict[str, str] = {}
    rows: list[tuple[Any, ...]] = []
    for role in FILES:
        path = run.paths.get(role)
        if path is None:
            status = f"unreadable: {run.problems[role]}" if role in run.problems else None
            rows.append((run.names[role], status or "not in this run", None, None))
            continue
        hashes[role] = file_sha256(path)
        status = f"unreadable: {run.problems[role]}" if role in run.problems else "read"
        if role in run.set_aside:
            status = f"not used: {run.set_aside[role]}"
        rows.append((run.names[role], status, path.stat().st_size, hashes[role]))
    parts = [
        f"<p>The run directory's files (report by ttlctl {e(__version__)}):</p>",
        table(("file", "status", "bytes", "sha256"), rows),
    ]
    trace = hashes.get("trace.parquet")
    # a bundle's trace_fitted is the trace its fit was made from: this run's trace too
    own = {"trace": trace, "trace_fitted": trace, "fit": hashes.get("fit.json")}
    bundle_ids = {hashes.get(BUNDLE), run.bundle and run.bundle.get("sha256")} - {None}
    docs: tuple[tuple[str, Mapping[str, Any] | None], ...] = (
        ("fit.json", run.fit if run.fit_source == "fit.json" else None),
        (BUNDLE, run.bundle),
        ("replay.json", run.replay),
        (SUMMARY, run.tune),
    )
    refs = []
    for doc_name, doc in docs:
        if not doc:
            continue
        for key, ref in _references(doc_name, doc).items():
            if not isinstance(ref, dict) or "sha256" not in ref:
                continue
            sha = ref.get("sha256")
            if key == "bundle":
                match = "yes" if sha in bundle_ids else ("no" if bundle_ids else "—")
            else:
                match = {True: "yes", False: "no", None: "—"}[names_file(ref, own.get(key))]
            refs.append((run.names[doc_name], key, ref.get("path"), sha, match))
    if refs:
        parts.append("<p>What each input says it was made from:</p>")
        parts.append(table(("in", "input", "recorded path", "sha256", "this run's file"), refs))
    return "".join(parts)
