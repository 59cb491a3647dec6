"""Run directories for the report tests, built once per session.

``sample_run``: the repo's samples through ingest → fit → bundle → replay, plus a
hand-written tune.json. ``evil_run``: a trace whose tool names, program id, policy
name, parameter names and directory name are HTML/JS/mathtext injections.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.report.runs import EVIL_DIR, EVIL_PARAM, EVIL_POLICY, evil_trace, pipeline, tune_doc
from ttlctl.report import build_report


@pytest.fixture(scope="session")
def sample_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("sample")
    pipeline(run)
    (run / "tune.json").write_text(json.dumps(tune_doc()), encoding="utf-8")
    return run


@pytest.fixture(scope="session")
def sample_page(sample_run: Path) -> str:
    return build_report(sample_run)


@pytest.fixture(scope="session")
def evil_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("evil") / EVIL_DIR
    run.mkdir()
    evil_trace(run / "trace.parquet")
    pipeline(run, run / "trace.parquet")
    replay = json.loads((run / "replay.json").read_text(encoding="utf-8"))
    replay["results"][1]["policy"] = EVIL_POLICY
    (run / "replay.json").write_text(json.dumps(replay), encoding="utf-8")
    tune = tune_doc((EVIL_PARAM, "eta", "$x$"))
    (run / "tune.json").write_text(json.dumps(tune), encoding="utf-8")
    return run


@pytest.fixture(scope="session")
def evil_page(evil_run: Path) -> str:
    return build_report(evil_run)
