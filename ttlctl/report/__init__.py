"""``ttlctl report``: a run directory → one self-contained HTML page.

The page shows the trace, the per-tool pause CDFs with their exponential fits and the
τ* the bundle's policy picks, τ* against context length, JCT per policy, the KV held by
pins over time, a fleet's routing (per-replica load, why calls missed), and the tuner's
history and parameter importance. Each input is optional: a missing or unreadable one
leaves a short note.

Its parts: :mod:`~ttlctl.report.files` names the run directory's files (which bundle,
and its summary), :mod:`~ttlctl.report.rundir` reads them;
:mod:`~ttlctl.report.markup` (HTML) and :mod:`~ttlctl.report.png` (plots as images)
are the primitives; one module per section (:mod:`~ttlctl.report.provenance`,
:mod:`~ttlctl.report.trace_summary`, :mod:`~ttlctl.report.pauses`,
:mod:`~ttlctl.report.tau`, :mod:`~ttlctl.report.jct`, :mod:`~ttlctl.report.pinned`,
:mod:`~ttlctl.report.fleet`,
:mod:`~ttlctl.report.tuning`); :mod:`~ttlctl.report.page` puts the page together.

Safety: every string in the page that comes from a run's files (tool names, program
ids, policy names, paths, parameter names) is HTML-escaped, attributes included, and
mathtext is switched off for it in the plots. The page has no script, no link and no
external URL: plots are PNG ``data:`` URIs (without matplotlib's metadata), the CSS is
inline, and a Content-Security-Policy forbids loading anything else.
"""

from ttlctl.report.files import FILES, ReportError, bundles, names
from ttlctl.report.page import SECTIONS, build_report, render, write_html
from ttlctl.report.rundir import MAX_TOOL_PLOTS, load

__all__ = [
    "FILES",
    "MAX_TOOL_PLOTS",
    "SECTIONS",
    "ReportError",
    "build_report",
    "bundles",
    "load",
    "names",
    "render",
    "write_html",
]
