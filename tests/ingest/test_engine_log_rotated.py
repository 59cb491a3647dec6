"""Rotated engine logs: a part with no engine line of its own (``copytruncate``, or a
server that went on writing after the move) is served by the replica its log's earlier
part names, whatever order the parts are given in, plain or ``.gz``.

It used to be named by its path: one replica read as two, and ``refit`` (the
``as-logged`` router) replayed a replica that never existed.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import pytest

from replay.refit_sizing import stated
from tests.ingest.test_engine_log import _facts, _req, _write
from ttlctl.ingest.formats.rotated import log_of, rotations
from ttlctl.ingest.pipeline import ingest
from ttlctl.trace import io as trace_io


def _part(path: Path, rows: list[dict[str, Any]], packed: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    _write(path, rows)
    if packed:
        path.write_bytes(gzip.compress(path.read_bytes(), mtime=0))
    return path


def _rotated(root: Path, name: str, at: float, packed: bool) -> list[Path]:
    """``<name>/engine.jsonl.1`` (``.gz`` if ``packed``) names the replica and logs the
    program's first call; ``<name>/engine.jsonl`` logs its last two with no engine line."""
    older = root / name / ("engine.jsonl.1" + (".gz" if packed else ""))
    return [
        _part(older, [_facts(name), _req(f"{name}1", name, at, at + 1, tool="grep")], packed),
        _part(
            root / name / "engine.jsonl",
            [
                _req(f"{name}2", name, at + 3, at + 4, tool="bash"),
                _req(f"{name}3", name, at + 6, at + 7, is_last=True),
            ],
        ),
    ]


def _replicas(trace: Path) -> list[tuple[str, int, str | None]]:
    frame = trace_io.read(trace).sort("program_id", "turn")
    return list(frame.select("program_id", "turn", "replica").iter_rows())


@pytest.mark.parametrize("packed", [False, True], ids=["plain", "gz"])
@pytest.mark.parametrize("order", ["oldest-first", "newest-first"])
def test_a_part_without_an_engine_line_is_the_replica_its_log_names(
    tmp_path: Path, order: str, packed: bool
) -> None:
    parts = _rotated(tmp_path, "r1", 0.0, packed)
    given = parts if order == "oldest-first" else parts[::-1]
    report = ingest(given, tmp_path / "t.parquet")
    assert _replicas(tmp_path / "t.parquet") == [("r1", 0, "r1"), ("r1", 1, "r1"), ("r1", 2, "r1")]
    assert [(e["replica"], e["calls"], e["file"]) for e in report.engines] == [
        ("r1", 3, str(parts[0]))
    ]
    assert trace_io.engines(tmp_path / "t.parquet") == report.engines


@pytest.mark.parametrize("order", ["as-listed", "reversed", "folders"])
def test_two_replicas_each_rotated_stay_two_replicas(tmp_path: Path, order: str) -> None:
    """r1 rotated plain, r2 rotated to ``.gz``; given part by part (oldest first, or all
    reversed) or as their folders (which list the newest part first)."""
    r1, r2 = _rotated(tmp_path, "r1", 0.0, False), _rotated(tmp_path, "r2", 0.5, True)
    given = {
        "as-listed": [*r1, *r2],
        "reversed": [*r2, *r1][::-1],
        "folders": [tmp_path / "r1", tmp_path / "r2"],
    }[order]
    report = ingest(given, tmp_path / "t.parquet")
    frame = trace_io.read(tmp_path / "t.parquet")
    assert sorted(frame["replica"].unique().to_list()) == ["r1", "r2"]
    assert _replicas(tmp_path / "t.parquet") == [
        (name, turn, name) for name in ("r1", "r2") for turn in range(3)
    ]
    assert sorted((e["replica"], e["calls"]) for e in report.engines) == [("r1", 3), ("r2", 3)]


def test_the_record_in_force_runs_through_every_earlier_part(tmp_path: Path) -> None:
    """Three parts, only the oldest with an engine line, given in a mixed order."""
    log = tmp_path / "a" / "engine.jsonl"
    oldest = _part(log.with_name("engine.jsonl.2.gz"), [_facts("r1"), _req("x1", "p", 0, 1)], True)
    middle = _part(log.with_name("engine.jsonl.1"), [_req("x2", "p", 2, 3)])
    newest = _part(log, [_req("x3", "p", 4, 5, is_last=True)])
    other = _part(tmp_path / "b" / "engine.jsonl", [_facts("r2"), _req("y1", "q", 0, 1)])
    report = ingest([middle, other, newest, oldest], tmp_path / "t.parquet")
    assert _replicas(tmp_path / "t.parquet") == [
        ("p", 0, "r1"),
        ("p", 1, "r1"),
        ("p", 2, "r1"),
        ("q", 0, "r2"),
    ]
    assert [(e["replica"], e["calls"]) for e in report.engines] == [("r2", 1), ("r1", 3)]


def test_a_part_s_own_engine_line_is_in_force_from_where_it_stands(tmp_path: Path) -> None:
    """The newer part logs one call under the older part's record, then the server starts
    again under another name: the calls after that line are the new name's."""
    log = tmp_path / "a" / "engine.jsonl"
    older = _part(log.with_name("engine.jsonl.1"), [_facts("r1"), _req("x1", "p", 0, 1)])
    newer = _part(log, [_req("x2", "p", 2, 3), _facts("r9", kv_blocks=127), _req("x3", "p", 4, 5)])
    report = ingest([newer, older], tmp_path / "t.parquet")
    assert _replicas(tmp_path / "t.parquet") == [("p", 0, "r1"), ("p", 1, "r1"), ("p", 2, "r9")]
    assert [(e["replica"], e["calls"]) for e in report.engines] == [("r9", 1), ("r1", 2)]


def test_the_newer_part_s_calls_count_for_the_record_in_force(tmp_path: Path) -> None:
    """An engine naming no replica, restarted larger in the older part: the newer part's
    calls were served by the larger one, which refit then sizes its replay as (the record
    that served most calls); they used to count for none, and the first size won the tie."""
    log = tmp_path / "log" / "engine.jsonl"
    older = [
        _facts(None),
        _req("x1", "p", 0, 1),
        _facts(None, kv_blocks=127),
        _req("x2", "q", 2, 3),
    ]
    _part(log.with_name("engine.jsonl.1"), older)
    _part(log, [_req(f"y{i}", "q", 4 + i, 4.5 + i) for i in range(3)])
    report = ingest([log.parent], tmp_path / "t.parquet")  # the folder: newest part first
    assert trace_io.read(tmp_path / "t.parquet")["replica"].null_count() == 5
    assert [(e["replica"], e["kv_blocks"], e["calls"]) for e in report.engines] == [
        (None, 63, 1),
        (None, 127, 4),
    ]
    assert stated(report.engines)[0]["kv_tokens"] == 127 * 32


def test_calls_before_any_engine_line_of_their_log_keep_its_path(tmp_path: Path) -> None:
    """Nothing is in force before the log's first engine line: the calls of an older part
    without one are named by the log's path, as a log naming no replica is (a later line
    may be another server's)."""
    log = tmp_path / "a" / "engine.jsonl"
    older = _part(log.with_name("engine.jsonl.1"), [_req("x1", "p", 0, 1)])
    newer = _part(log, [_facts("r1"), _req("x2", "p", 2, 3, is_last=True)])
    other = _part(tmp_path / "b" / "engine.jsonl", [_facts("r2"), _req("y1", "q", 0, 1)])
    report = ingest([newer, older, other], tmp_path / "t.parquet")
    assert _replicas(tmp_path / "t.parquet") == [
        ("p", 0, str(log)),
        ("p", 1, "r1"),
        ("q", 0, "r2"),
    ]
    assert [(e["replica"], e["calls"]) for e in report.engines] == [("r1", 1), ("r2", 1)]


def test_a_part_s_rotations_are_its_number() -> None:
    names = ("x.jsonl.12.gz", "x.jsonl.1", "x.jsonl.gz", "x.jsonl", "x.2024.jsonl")
    assert [rotations(Path(n)) for n in names] == [12, 1, 0, 0, 0]
    assert {log_of(Path(n)).name for n in names[:4]} == {"x.jsonl"}
