"""A small agent workload made here (no shared traces): 20 programs, two tools, a fit."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from fitting.fit import FitConfig, fit_trace
from profiles.shipped import resolve
from replay.policy_runs import Load
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.tune import TuneContext
from replay.tune.context import shuffled
from replay.workload import load
from tests.tune.inputs import KV_TOKENS, PROFILE, write_trace
from ttlctl.trace import io as trace_io


@pytest.fixture(scope="session")
def tune_inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """trace.parquet, fit.json and the context a study replays (built once per session)."""
    import json

    root = tmp_path_factory.mktemp("tune")
    trace = write_trace(root / "trace.parquet")
    fit_doc = fit_trace(trace_io.scan(trace), FitConfig(min_samples=10, bootstrap=50))
    fit_path = root / "fit.json"
    fit_path.write_text(json.dumps(fit_doc))
    profile, _ = resolve(PROFILE)
    ctx = TuneContext(
        workload=load(trace),
        fit=fit_doc,
        profile=profile.to_json(),
        config=ReplayConfig(engine=SimSchedulerConfig(kv_tokens=KV_TOKENS)),
        loads=(Load(concurrency=6), Load(concurrency=12)),
        seeds=(0, 1),
    )
    return {"root": root, "trace": trace, "fit": fit_path, "ctx": ctx}


class _Records(logging.Handler):
    """What Optuna logs (its loggers do not propagate to pytest's)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def optuna_log() -> Iterator[list[logging.LogRecord]]:
    handler = _Records()
    logger = logging.getLogger("optuna")
    logger.addHandler(handler)
    try:
        yield handler.records
    finally:
        logger.removeHandler(handler)


@pytest.fixture(scope="session")
def in_tune_order(tune_inputs: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The trace with its programs in the order tune's seed 0 starts them (a replay starts
    them by first arrival; with --concurrency every one still starts when a slot frees)."""
    order = [p.program_id for p in shuffled(load(tune_inputs["trace"]), 0).programs]
    rank = {pid: float(i) for i, pid in enumerate(order)}
    frame = pl.read_parquet(tune_inputs["trace"]).with_columns(
        pl.when(pl.col("turn") == 0)
        .then(pl.col("program_id").replace_strict(rank, return_dtype=pl.Float64) * 1e-3)
        .otherwise(None)
        .alias("arrival_s")
    )
    path = tmp_path_factory.mktemp("ordered") / "trace.parquet"
    frame.write_parquet(path)
    assert [p.program_id for p in load(path).programs] == order
    return path
