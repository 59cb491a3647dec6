"""Which files of a run directory the report reads: each role's file (the trace, the fit,
the bundle, the replay, tune's summary) by name, with the bundle's summary named as
``ttlctl tune`` names it (:func:`ttlctl.summary_name.summary_path`: bundle.json's is
tune.json, b2.json's b2.tune.json), and which bundle when the folder holds several."""

from __future__ import annotations

from pathlib import Path

from ttlctl.errors import TtlctlError
from ttlctl.summary_name import summary_path

#: the roles of a run directory's files, in the order the page lists them; each is also the
#: file's name, but for a bundle under another name and its summary (:func:`names`)
FILES = ("trace.parquet", "fit.json", "bundle.json", "replay.json", "tune.json")
BUNDLE = "bundle.json"
SUMMARY = "tune.json"


class ReportError(TtlctlError, ValueError):
    """No report can be made (no such directory, nothing in it, or which bundle to report
    is not said); one line."""


def bundles(root: Path) -> list[str]:
    """The bundles ``root`` holds, by file name: bundle.json, and each NAME.json beside
    its summary NAME.tune.json (what ``tune -o root/NAME.json`` writes); bundle.json first."""
    tuned = sorted(
        p.name
        for p in root.glob("*.json")
        if p.name != BUNDLE and p.is_file() and summary_path(p).is_file()
    )
    return ([BUNDLE] if (root / BUNDLE).is_file() else []) + tuned


def names(root: Path, bundle: str | None = None) -> dict[str, str]:
    """Each role's file name in ``root``: :data:`FILES`, with the bundle reported
    (``bundle``, a file in ``root``; None: bundle.json when ``root`` holds one, as the
    report always read it, else the one other bundle :func:`bundles` finds) and its
    summary. :class:`ReportError` when ``root`` is not a directory, when ``bundle`` is not
    a file in it, or when ``bundle`` is None and ``root`` holds several bundles but no
    bundle.json: one page shows one."""
    if not root.exists():
        raise ReportError(f"{root}: no such directory")
    if not root.is_dir():
        raise ReportError(f"{root}: not a directory")
    if bundle is None:
        found = bundles(root)
        if len(found) > 1 and BUNDLE not in found:
            raise ReportError(
                f"{root}: {len(found)} bundles ({', '.join(found)}); a report shows one: "
                "name it with --bundle"
            )
        chosen = found[0] if found else BUNDLE  # bundle.json first
    else:
        chosen = _in_root(root, bundle)
    return {role: role for role in FILES} | {
        BUNDLE: chosen,
        SUMMARY: summary_path(root / chosen).name,
    }


def _in_root(root: Path, bundle: str) -> str:
    """``bundle``'s file name, when it names a file in ``root`` (by name, or by a path
    into ``root``)."""
    path = Path(bundle)
    if len(path.parts) > 1 and path.parent.resolve() != root.resolve():
        raise ReportError(f"--bundle {bundle}: not in {root} (name a bundle of the run directory)")
    if not (root / path.name).is_file():
        raise ReportError(f"--bundle {bundle}: no such file in {root}")
    return path.name
