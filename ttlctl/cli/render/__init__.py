"""Command results for people, one module per concern (machines get ``--json``).

Every function prints to the console it is given: ``kit.out`` for results, ``kit.err``
for reports about the run (an ingest's reading).
"""

from __future__ import annotations

from ttlctl.cli.render.bundle_view import bundle_table
from ttlctl.cli.render.fit_view import fit_table
from ttlctl.cli.render.fleet_view import fleet_tables
from ttlctl.cli.render.profile_view import profile_table, router_calibration, shipped_table
from ttlctl.cli.render.refit_view import refit_report
from ttlctl.cli.render.replay_view import replay_table
from ttlctl.cli.render.trace_view import ingest_report, trace_summary
from ttlctl.cli.render.tune_view import tune_table
from ttlctl.cli.render.validate_view import fleet_table, validate_table

__all__ = [
    "bundle_table",
    "fit_table",
    "fleet_table",
    "fleet_tables",
    "ingest_report",
    "profile_table",
    "refit_report",
    "replay_table",
    "router_calibration",
    "shipped_table",
    "trace_summary",
    "tune_table",
    "validate_table",
]
