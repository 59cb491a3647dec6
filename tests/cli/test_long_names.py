"""A path with a name longer than the file system takes (255 bytes on most: here 200 'é',
400 bytes in UTF-8), given as any command's input or output: exit 2 and one line naming
the path and saying why (``cannot read (file name too long)``, ``cannot write here (file
name too long)``), never a traceback, and nothing written. Regression: pathlib's
``is_file``, ``is_dir``, ``exists`` and ``is_symlink`` raise on such a name (errno 36,
ENAMETOOLONG) where they return False for a missing file, so nearly every command ended
in one or two chained tracebacks (exit 1)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ttlctl.cli import app

#: a file name of 400 bytes (255 is the most ext4, tmpfs, XFS and btrfs take)
LONG = "é" * 200

#: the command line, given the long path, the sound inputs and an empty output folder
Args = Callable[[Path, dict[str, Path], Path], list[str]]

#: (the long path's suffix, the command line): the long path as an input
INPUTS: dict[str, tuple[str, Args]] = {
    "ingest": (".jsonl", lambda bad, ok, out: ["ingest", str(bad), "-o", str(out / "t.parquet")]),
    "fit": (".parquet", lambda bad, ok, out: ["fit", str(bad), "-o", str(out / "f.json")]),
    "replay": (".parquet", lambda bad, ok, out: ["replay", str(bad), "--policy", "vllm"]),
    "replay --bundle": (
        ".json",
        lambda bad, ok, out: ["replay", str(ok["trace"]), "--policy", "continuum",
                              "--bundle", str(bad)],
    ),
    "replay --profile": (
        ".json",
        lambda bad, ok, out: ["replay", str(ok["trace"]), "--policy", "vllm",
                              "--profile", str(bad)],
    ),
    "export": (
        ".parquet",
        lambda bad, ok, out: ["export", str(bad), "--to", "mooncake", "-o", str(out / "m.jsonl")],
    ),
    "tune": (
        ".parquet",
        lambda bad, ok, out: ["tune", str(bad), "--fit", str(ok["fit"]), "--profile",
                              "llama-3.1-8b-h100", "-o", str(out / "b.json"), "--trials", "1"],
    ),
    "tune --fit": (
        ".json",
        lambda bad, ok, out: ["tune", str(ok["trace"]), "--fit", str(bad), "--profile",
                              "llama-3.1-8b-h100", "-o", str(out / "b.json"), "--trials", "1"],
    ),
    "tune --profile": (
        ".json",
        lambda bad, ok, out: ["tune", str(ok["trace"]), "--fit", str(ok["fit"]), "--profile",
                              str(bad), "-o", str(out / "b.json"), "--trials", "1"],
    ),
    "bundle build --fit": (
        ".json",
        lambda bad, ok, out: ["bundle", "build", "--fit", str(bad), "--profile",
                              "llama-3.1-8b-h100", "-o", str(out / "b.json")],
    ),
    "bundle build --profile": (
        ".json",
        lambda bad, ok, out: ["bundle", "build", "--fit", str(ok["fit"]), "--profile",
                              str(bad), "-o", str(out / "b.json")],
    ),
    "bundle verify": (".json", lambda bad, ok, out: ["bundle", "verify", str(bad)]),
    "bundle inspect": (".json", lambda bad, ok, out: ["bundle", "inspect", str(bad)]),
    "bundle query": (
        ".json",
        lambda bad, ok, out: ["bundle", "query", str(bad), "--tool", "grep",
                              "--context-tokens", "1000"],
    ),
    "bundle rollback": (".json", lambda bad, ok, out: ["bundle", "rollback", str(bad)]),
    "serve --bundle": (
        ".json",
        lambda bad, ok, out: ["serve", "m", "--bundle", str(bad), "--print-command"],
    ),
    "refit": (
        ".parquet",
        lambda bad, ok, out: ["refit", str(bad), "--bundle", str(ok["bundle"]), "--dry-run"],
    ),
    "refit --bundle": (
        ".json",
        lambda bad, ok, out: ["refit", str(ok["trace"]), "--bundle", str(bad), "--dry-run"],
    ),
    "validate": (
        ".parquet",
        lambda bad, ok, out: ["validate", str(bad), "--url", "vllm=http://127.0.0.1:9",
                              "--policy", "vllm", "--profile", "llama-3.1-8b-h100"],
    ),
    "report": ("", lambda bad, ok, out: ["report", str(bad), "-o", str(out / "r.html")]),
    "profile --model": (
        ".json", lambda bad, ok, out: ["profile", "--model", str(bad), "-o", str(out / "p.json")]
    ),
    "profile --profile": (
        ".json",
        lambda bad, ok, out: ["profile", "--profile", str(bad), "--as", "vllm-router"],
    ),
}  # fmt: skip

#: (the long path's suffix, the command line): the long path as an output
OUTPUTS: dict[str, tuple[str, Args]] = {
    "ingest -o": (
        ".parquet", lambda bad, ok, out: ["ingest", str(ok["trace"]), "-o", str(bad)]
    ),
    "ingest --json": (
        ".json",
        lambda bad, ok, out: ["ingest", str(ok["trace"]), "-o", str(out / "t.parquet"),
                              "--json", str(bad)],
    ),
    "fit -o": (".json", lambda bad, ok, out: ["fit", str(ok["trace"]), "-o", str(bad)]),
    "fit --json": (
        ".json",
        lambda bad, ok, out: ["fit", str(ok["trace"]), "-o", str(out / "f.json"),
                              "--json", str(bad)],
    ),
    "fit --plot": (
        "",
        lambda bad, ok, out: ["fit", str(ok["trace"]), "-o", str(out / "f.json"),
                              "--plot", str(bad)],
    ),
    "replay --json": (
        ".json",
        lambda bad, ok, out: ["replay", str(ok["trace"]), "--policy", "vllm", "--json", str(bad)],
    ),
    "tune -o": (
        ".json",
        lambda bad, ok, out: ["tune", str(ok["trace"]), "--fit", str(ok["fit"]), "--profile",
                              "llama-3.1-8b-h100", "-o", str(bad), "--trials", "1"],
    ),
    "tune --json": (
        ".json",
        lambda bad, ok, out: ["tune", str(ok["trace"]), "--fit", str(ok["fit"]), "--profile",
                              "llama-3.1-8b-h100", "-o", str(out / "b.json"), "--trials", "1",
                              "--json", str(bad)],
    ),
    "bundle build -o": (
        ".json",
        lambda bad, ok, out: ["bundle", "build", "--fit", str(ok["fit"]), "--profile",
                              "llama-3.1-8b-h100", "-o", str(bad)],
    ),
    "synth": (
        ".parquet",
        lambda bad, ok, out: ["synth", "--workload", "bfcl", "--programs", "2", "-o", str(bad)],
    ),
    "export": (
        ".jsonl",
        lambda bad, ok, out: ["export", str(ok["trace"]), "--to", "mooncake", "-o", str(bad)],
    ),
    "report": (
        ".html",
        lambda bad, ok, out: ["report", str(ok["trace"].parent), "-o", str(bad)],
    ),
    "refit -o": (
        ".json",
        lambda bad, ok, out: ["refit", str(ok["trace"]), "--bundle", str(ok["bundle"]),
                              "-o", str(bad)],
    ),
    "refit --trace": (
        ".parquet",
        lambda bad, ok, out: ["refit", str(ok["trace"]), "--bundle", str(ok["bundle"]),
                              "--trace", str(bad)],
    ),
    "profile -o": (".json", lambda bad, ok, out: ["profile", "-o", str(bad)]),
    "serve --log": (
        ".log",
        lambda bad, ok, out: ["serve", "m", "--bundle", str(ok["bundle"]), "--log", str(bad),
                              "--print-command"],
    ),
    "serve --metrics-dir": (
        "",
        lambda bad, ok, out: ["serve", "m", "--bundle", str(ok["bundle"]), "--metrics-dir",
                              str(bad), "--print-command"],
    ),
    "tune --storage": (
        ".db",
        lambda bad, ok, out: ["tune", str(ok["trace"]), "--fit", str(ok["fit"]), "--profile",
                              "llama-3.1-8b-h100", "-o", str(out / "b.json"), "--trials", "1",
                              "--storage", str(bad)],
    ),
    "validate --work-dir": (
        "",
        lambda bad, ok, out: ["validate", str(ok["trace"]), "--url", "vllm=http://127.0.0.1:9",
                              "--policy", "vllm", "--profile", "llama-3.1-8b-h100",
                              "--work-dir", str(bad)],
    ),
    "replay --result-dir": (
        "",
        lambda bad, ok, out: ["replay", str(ok["trace"]), "--policy", "vllm", "--live",
                              "http://127.0.0.1:9", "--save-result", "--result-dir", str(bad)],
    ),
}  # fmt: skip


@pytest.fixture(scope="module")
def sound(
    small_inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """The small trace and fit, and a bundle built from them."""
    bundle = tmp_path_factory.mktemp("bundle") / "bundle.json"
    build = ["bundle", "build", "--fit", str(small_inputs["fit"]), "--profile",
             "llama-3.1-8b-h100", "-o", str(bundle)]  # fmt: skip
    res = CliRunner().invoke(app, build)
    assert res.exit_code == 0, res.output
    return {**small_inputs, "bundle": bundle}


def _one_line(res: object, bad: Path, why: str, case: str) -> None:
    exit_code, stderr, output = (getattr(res, name) for name in ("exit_code", "stderr", "output"))
    assert exit_code == 2, (case, output)
    assert "Traceback" not in output, case
    (line,) = stderr.strip().splitlines()
    # serve prefixes "bundle refused: " and suffixes what --allow-stock would do
    assert line.startswith("error: ") and f" {bad}: {why}" in line, (case, line)


@pytest.mark.parametrize("case", sorted(INPUTS))
def test_an_input_with_too_long_a_name_is_one_line(
    sound: dict[str, Path], tmp_path: Path, case: str
) -> None:
    suffix, args = INPUTS[case]
    bad = tmp_path / f"{LONG}{suffix}"
    out = tmp_path / "out"
    out.mkdir()
    res = CliRunner().invoke(app, args(bad, sound, out))
    _one_line(res, bad, "cannot read (file name too long)", case)
    assert list(out.iterdir()) == [], case


@pytest.mark.parametrize("case", sorted(OUTPUTS))
@pytest.mark.parametrize("where", ["the file", "a folder on the way"])
def test_an_output_with_too_long_a_name_is_refused_first(
    sound: dict[str, Path], tmp_path: Path, case: str, where: str
) -> None:
    suffix, args = OUTPUTS[case]
    out = tmp_path / "out"
    out.mkdir()
    bad = out / f"{LONG}{suffix}" if where == "the file" else out / LONG / f"x{suffix}"
    res = CliRunner().invoke(app, args(bad, sound, out))
    _one_line(res, bad, "cannot write here (file name too long)", case)
    assert list(out.iterdir()) == [], case
