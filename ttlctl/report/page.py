"""The page: the sections in order, each drawn on its own (one that fails is a note, not
a lost page), inside one self-contained HTML document; and its atomic write."""

from __future__ import annotations

import errno
import warnings
from collections.abc import Callable
from pathlib import Path

from ttlctl.jsonio import write_atomic
from ttlctl.report import fleet, jct, pauses, pinned, provenance, tau, trace_summary, tuning
from ttlctl.report.markup import CSP, CSS, e, note
from ttlctl.report.rundir import RunInputs, load

#: (id, title, how it is drawn), in the page's order
SECTIONS: tuple[tuple[str, str, Callable[[RunInputs], str]], ...] = (
    ("inputs", "Inputs", provenance.section),
    ("trace", "Trace", trace_summary.section),
    ("cdfs", "Pause CDFs per tool", pauses.section),
    ("tau", "τ* against context length", tau.section),
    ("jct", "JCT per policy", jct.section),
    ("pinned", "KV held by pins over time", pinned.section),
    ("fleet", "Fleet: routing, per-replica load, why calls missed", fleet.section),
    ("tune", "Tuning history and parameter importance", tuning.section),
)


def build_report(
    run_dir: Path, max_num_batched_tokens: int | None = None, bundle: str | None = None
) -> str:
    """The HTML page of a run directory; :class:`ReportError` if there is nothing to show,
    or which bundle is not said. ``max_num_batched_tokens``: the serving engine's step
    budget the τ* shown price a miss in (None: the bundle's profile's); ``bundle``: the
    bundle of ``run_dir`` to show (:func:`~ttlctl.report.rundir.load`)."""
    return render(load(Path(run_dir), max_num_batched_tokens, bundle))


def render(run: RunInputs) -> str:
    """The HTML page of what :func:`~ttlctl.report.rundir.load` read."""
    body = []
    with warnings.catch_warnings():
        # tool names may use glyphs the plot font lacks: a box is drawn, no need to warn
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing from")
        for sid, title, build in SECTIONS:
            try:
                content = build(run)
            except Exception as exc:  # one odd input must not cost the whole page
                content = note(f"this section could not be drawn: {type(exc).__name__}: {exc}")
            body.append(f'<section id="{sid}"><h2>{e(title)}</h2>{content}</section>')
    nav = "".join(f'<a href="#{sid}">{e(title)}</a>' for sid, title, _ in SECTIONS)
    # the page names the run directory once, whole, in its heading; the tab its name
    where = run.root.resolve()
    name = where.name or str(where)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="referrer" content="no-referrer">'
        f"<title>ttlctl report: {e(name)}</title><style>{CSS}</style></head><body>"
        f"<h1>ttlctl report: {e(where)}</h1><nav>{nav}</nav>" + "".join(body) + "</body></html>\n"
    )


def write_html(text: str, path: Path) -> None:
    """Write the page atomically: the file is whole or absent, never half-written."""
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "is a directory", str(path))
    write_atomic(text, path)
