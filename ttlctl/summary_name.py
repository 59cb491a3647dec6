"""Where ``ttlctl tune`` puts its study summary beside the bundle it writes: ``tune.json``
beside a ``bundle.json``, else named after the bundle (``b2.json``: ``b2.tune.json``), so
that two bundles tuned into one folder keep a summary each. Tune writes it there and the
report finds a bundle by it; this module imports nothing, so the report does not load the
tuner to know the name."""

from __future__ import annotations

from pathlib import Path


def summary_path(output: Path) -> Path:
    """Where the study summary of the bundle written to ``output`` goes by default."""
    if output.name == "bundle.json":
        return output.parent / "tune.json"
    return output.parent / f"{output.stem}.tune.json"
