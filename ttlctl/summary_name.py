"""Where ``ttlctl tune`` puts its study summary beside the bundle it writes: ``tune.json``
beside a ``bundle.json``, else named after the bundle (``b2.json``: ``b2.tune.json``), so
that two bundles tuned into one folder keep a summary each, and what the summary's
``schema`` says. Tune writes it there and the report finds a bundle by it and knows it by
its schema; this module imports nothing, so the report does not load the tuner to know
either."""

from __future__ import annotations

from pathlib import Path

#: the study summary's ``schema``: its family (``ttlctl.tune``), a slash, its version
SUMMARY_SCHEMA = "ttlctl.tune/1"
#: what every version's ``schema`` starts with
SUMMARY_FAMILY = SUMMARY_SCHEMA.split("/")[0] + "/"


def summary_path(output: Path) -> Path:
    """Where the study summary of the bundle written to ``output`` goes by default."""
    if output.name == "bundle.json":
        return output.parent / "tune.json"
    return output.parent / f"{output.stem}.tune.json"
