"""Every command that reads a file, fed a damaged one: exit 0 (the damage left it readable)
or exit 2 with one line naming the file; never a traceback, and nothing written.

Hypothesis damages a small trace (Parquet), a fit, a bundle and a profile (JSON): cut short,
bytes flipped (a Parquet page, a JSON value), a byte that is not UTF-8, emptied, or replaced
by a well-formed file of the wrong kind (another schema). Each command reads the damaged file
in the role it has there (``fit TRACE``, ``replay --bundle``, ``bundle build --profile`` …)
with everything else sound, and writes into an empty folder that must stay empty when it
fails.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from profiles.shipped import DATA
from tests.conftest import make_trace
from ttlctl.cli import app

KINDS = ["truncate", "flip", "not_utf8", "empty", "wrong_schema"]


@pytest.fixture(scope="module")
def sound(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A sound trace, fit, bundle and profile file, built once."""
    root = tmp_path_factory.mktemp("sound")
    trace = make_trace(root / "trace.parquet", programs=24)
    runner = CliRunner()
    fit, bundle = root / "fit.json", root / "bundle.json"
    res = runner.invoke(app, ["fit", str(trace), "-o", str(fit), "--bootstrap", "20"])
    assert res.exit_code == 0, res.output
    profile = root / "profile.json"
    shutil.copy(DATA / "llama-3.1-8b-h100.json", profile)
    build = ["bundle", "build", "--fit", str(fit), "--profile", str(profile), "-o", str(bundle)]
    res = runner.invoke(app, build)
    assert res.exit_code == 0, res.output
    return {"trace": trace, "fit": fit, "bundle": bundle, "profile": profile}


def damage(data: bytes, kind: str, draw: st.DrawFn, parquet: bool) -> bytes:
    if kind == "truncate":
        return data[: draw(st.integers(1, len(data) - 1))]
    if kind == "flip":
        buf = bytearray(data)
        start = draw(st.integers(0, len(buf) - 17))
        for i in range(start, start + draw(st.integers(1, 16))):
            buf[i] ^= 0xFF
        return bytes(buf)
    if kind == "not_utf8":
        at = draw(st.integers(0, len(data)))
        return data[:at] + b"\xc3\x28\xff" + data[at:]
    if kind == "empty":
        return b""
    # wrong_schema: a well-formed file of another kind
    if parquet:
        path = Path(tempfile.mkstemp(suffix=".parquet")[1])
        pl.DataFrame({"session": ["a"], "tokens": [3]}).write_parquet(path)
        other = path.read_bytes()
        path.unlink()
        return other
    return json.dumps(draw(st.sampled_from([{"schema": "x"}, [1, 2], {"tools": {}}]))).encode()


#: (command, the file it reads): the command line, given the damaged file, the sound files
#: and an empty output folder
Args = Callable[[Path, dict[str, Path], Path], list[str]]
CASES: dict[str, tuple[str, Args]] = {
    "ingest": ("trace", lambda bad, ok, out: ["ingest", str(bad), "-o", str(out / "t.parquet")]),
    "ingest --skip-bad": (
        "trace",
        lambda bad, ok, out: ["ingest", str(bad), "-o", str(out / "t.parquet"), "--skip-bad"],
    ),
    "fit": ("trace", lambda bad, ok, out: ["fit", str(bad), "-o", str(out / "f.json")]),
    "replay": (
        "trace",
        lambda bad, ok, out: ["replay", str(bad), "--policy", "vllm", "--concurrency", "4"],
    ),
    "replay --bundle": (
        "bundle",
        lambda bad, ok, out: [
            "replay", str(ok["trace"]), "--policy", "continuum", "--bundle", str(bad),
            "--concurrency", "4",
        ],
    ),
    "export": (
        "trace",
        lambda bad, ok, out: ["export", str(bad), "--to", "mooncake", "-o", str(out / "m.jsonl")],
    ),
    "bundle build --fit": (
        "fit",
        lambda bad, ok, out: [
            "bundle", "build", "--fit", str(bad), "--profile", str(ok["profile"]),
            "-o", str(out / "b.json"),
        ],
    ),
    "bundle build --profile": (
        "profile",
        lambda bad, ok, out: [
            "bundle", "build", "--fit", str(ok["fit"]), "--profile", str(bad),
            "-o", str(out / "b.json"),
        ],
    ),
    "bundle verify": ("bundle", lambda bad, ok, out: ["bundle", "verify", str(bad)]),
    "bundle inspect": ("bundle", lambda bad, ok, out: ["bundle", "inspect", str(bad)]),
    "serve --print-command": (
        "bundle",
        lambda bad, ok, out: ["serve", "m", "--bundle", str(bad), "--print-command"],
    ),
    "tune": (
        "trace",
        lambda bad, ok, out: [
            "tune", str(bad), "--fit", str(ok["fit"]), "--profile", str(ok["profile"]),
            "-o", str(out / "b.json"), "--trials", "1", "--seeds", "1", "--holdout-seeds", "1",
            "--concurrency", "4",
        ],
    ),
    "tune --fit": (
        "fit",
        lambda bad, ok, out: [
            "tune", str(ok["trace"]), "--fit", str(bad), "--profile", str(ok["profile"]),
            "-o", str(out / "b.json"), "--trials", "1", "--seeds", "1", "--holdout-seeds", "1",
            "--concurrency", "4",
        ],
    ),
    "refit": (
        "trace",
        lambda bad, ok, out: [
            "refit", str(bad), "--bundle", str(ok["bundle"]), "--dry-run", "--seeds", "1",
            "--concurrency", "4",
        ],
    ),
    "refit --bundle": (
        "bundle",
        lambda bad, ok, out: [
            "refit", str(ok["trace"]), "--bundle", str(bad), "--dry-run", "--seeds", "1",
            "--concurrency", "4",
        ],
    ),
    "validate": (
        "trace",
        lambda bad, ok, out: ["validate", str(bad), "--url", "vllm=http://127.0.0.1:9",
                              "--policy", "vllm", "--profile", str(ok["profile"]),
                              "--kv-tokens", "4096"],
    ),
    "report": (
        "trace",
        lambda bad, ok, out: ["report", str(bad.parent), "-o", str(out / "r.html")],
    ),
    "report --fit": (
        "fit",
        lambda bad, ok, out: ["report", str(bad.parent), "-o", str(out / "r.html")],
    ),
}  # fmt: skip
#: commands whose run on a still-readable file is slow: only damage that leaves it unreadable
SLOW = {"tune", "tune --fit", "refit", "refit --bundle"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_damaged_file_is_one_line_and_exit_2(sound: dict[str, Path], case: str) -> None:
    role, args = CASES[case]
    original = sound[role].read_bytes()
    kinds = ["truncate", "empty", "wrong_schema"] if case in SLOW else KINDS

    @settings(
        max_examples=int(os.environ.get("TTLCTL_PROPERTY_EXAMPLES", "6")),
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(data=st.data(), kind=st.sampled_from(kinds))
    def run(data: st.DataObject, kind: str) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            bad = Path(tmp) / sound[role].name
            bad.write_bytes(damage(original, kind, data.draw, sound[role].suffix == ".parquet"))
            out = Path(tmp) / "out"
            out.mkdir()
            res = CliRunner().invoke(app, args(bad, sound, out))
            assert res.exit_code in (0, 2), (kind, res.output, res.exception)
            if res.exit_code == 2:
                lines = res.stderr.strip().splitlines()
                errors = [line for line in lines if line.startswith("error: ")]
                assert len(errors) == 1 and lines[-1] == errors[0], (kind, res.stderr)
                assert str(bad) in errors[0], (kind, errors[0])
                assert list(out.iterdir()) == [], (kind, errors[0])
                assert sorted(p.name for p in Path(tmp).iterdir()) == sorted([bad.name, "out"])

    run()


def test_a_folder_given_for_a_trace_is_said_to_be_one(tmp_path: Path) -> None:
    """`fit logs/` (a folder of logs, not yet ingested) was told "no such file"."""
    logs = tmp_path / "logs"
    logs.mkdir()
    for args in (
        ["fit", str(logs), "-o", str(tmp_path / "f.json")],
        ["replay", str(logs), "--policy", "vllm"],
        ["validate", str(logs), "--url", "vllm=http://127.0.0.1:9", "--policy", "vllm"],
    ):
        res = CliRunner().invoke(app, args)
        assert res.exit_code == 2, (args, res.output)
        (line,) = res.stderr.strip().splitlines()
        assert line.startswith(f"error: {logs}: is a directory, not a Parquet trace"), line
        assert f"`ttlctl ingest {logs} -o trace.parquet`" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]


def test_an_empty_trace_is_said_to_be_empty(tmp_path: Path) -> None:
    """Regression: an empty (or blank) file given as the trace was "not a Parquet trace
    (make one with `ttlctl ingest empty.parquet -o trace.parquet`)", a hint that led to
    ingest's "empty file"; it says so itself now, as the JSON readers do."""
    for name, data in (("empty.parquet", b""), ("blank.parquet", b"\xef\xbb\xbf \n\n")):
        trace = tmp_path / name
        trace.write_bytes(data)
        for args in (
            ["fit", str(trace), "-o", str(tmp_path / "out" / "f.json")],
            ["export", str(trace), "--to", "mooncake", "-o", str(tmp_path / "out" / "m.jsonl")],
            ["replay", str(trace), "--policy", "vllm"],
        ):
            res = CliRunner().invoke(app, args)
            assert res.exit_code == 2, (args, res.output)
            (line,) = res.stderr.strip().splitlines()
            assert line == f"error: {trace}: empty file", line
    assert not (tmp_path / "out").exists()
