"""A program held twice (the same program id and turns in two files, or twice in one file)
is a duplicate (program, turn): its reason names where the first copy is, file and line, as
the error names the second, so a user finds both copies without searching; the program's
other rows name the bad record with its file when that is another."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ttlctl.ingest.pipeline import ingest
from ttlctl.ingest.rejects import IngestError


def _call(program: str, turn: int, *, last: bool) -> dict[str, Any]:
    return {
        "program_id": program,
        "turn": turn,
        "arrival_s": 10.0 * turn,
        "input_tokens": 100 * (turn + 1),
        "output_tokens": 10,
        "tool": None if last else "bash",
    }


def _program(name: str) -> list[dict[str, Any]]:
    return [_call(name, 0, last=False), _call(name, 1, last=True)]


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_program_in_two_files_names_both_copies(tmp_path: Path) -> None:
    first = _jsonl(tmp_path / "a.jsonl", _program("p"))
    second = _jsonl(tmp_path / "b.jsonl", [*_program("q"), *_program("p")])
    with pytest.raises(IngestError) as info:
        ingest([first, second], tmp_path / "out.parquet")
    assert str(info.value) == (
        f"{second}: line 3: duplicate (program, turn): turn 0 appears again "
        f"(first at {first}, line 1)"
    )

    report = ingest([first, second], tmp_path / "out.parquet", skip_bad=True)
    assert (report.rows, report.rejected) == (2, 4)
    rejects = Path(report.rejects_path or "").read_text().splitlines()
    reasons = {(r["file"], r["record"]): r["reason"] for r in map(json.loads, rejects)}
    duplicate = "duplicate (program, turn): turn {} appears again (first at {}, line {})"
    echo = f"rejected with its program: p has a bad record ({second}, line 3)"
    assert reasons == {
        (str(first), "line 1"): echo,
        (str(first), "line 2"): echo,
        (str(second), "line 3"): duplicate.format(0, first, 1),
        (str(second), "line 4"): duplicate.format(1, first, 2),
    }


def test_a_program_twice_in_one_file_names_the_first_line(tmp_path: Path) -> None:
    src = _jsonl(tmp_path / "t.jsonl", [*_program("p"), *_program("q"), *_program("p")])
    with pytest.raises(IngestError) as info:
        ingest([src], tmp_path / "out.parquet")
    assert str(info.value) == (
        f"{src}: line 5: duplicate (program, turn): turn 0 appears again (first at line 1)"
    )


def test_every_later_copy_names_the_first(tmp_path: Path) -> None:
    """A third copy is no 'twice': each later copy says it appears again, and where first."""
    rows = [*_program("p"), *_program("p"), *_program("p"), *_program("q")]
    src = _jsonl(tmp_path / "t.jsonl", rows)
    report = ingest([src], tmp_path / "out.parquet", skip_bad=True)
    rejects = Path(report.rejects_path or "").read_text().splitlines()
    reasons = {r["record"]: r["reason"] for r in map(json.loads, rejects)}
    again = "duplicate (program, turn): turn {} appears again (first at line {})"
    assert reasons["line 3"] == reasons["line 5"] == again.format(0, 1)
    assert reasons["line 4"] == reasons["line 6"] == again.format(1, 2)
