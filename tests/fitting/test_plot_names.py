"""`ttlctl fit --plot DIR`: one PNG per tool, whose file name maps back to the tool. A tool name
that is not a safe file name (a slash, a space, other scripts, 200 characters), or whose file
another already has (a tool named `global`, `bash` beside `Bash` on a file system that ignores
case), gets its name's hash after its safe form; `DIR/index.json` lists tool → file, and the
command says where it is. Regression: such names were cut to their safe form and a clash got
`_` appended (`git_commit.png`, `git_commit_.png`: which is which depended on the order), and
`Bash.png` and `bash.png` were one file on macOS."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from ttlctl.cli import app
from ttlctl.ingest.pipeline import ingest
from ttlctl.plots import file_names, plot_fit

TOOLS = [
    "git/commit",
    "git commit",
    "git_commit",
    "Bash",
    "bash",
    "global",
    "ünïcode",
    "日本",
    "x" * 100 + "a",
    "x" * 100 + "b",
    ".hidden",
    "grep",
]


def _trace(tmp_path: Path) -> Path:
    rows = []
    for i, tool in enumerate(TOOLS):
        pause = 1.0 + i
        rows += [
            {"program_id": f"p{i}", "turn": 0, "arrival_s": 0.0, "input_tokens": 10,
             "output_tokens": 5, "tool": tool, "tool_s": pause, "gap_s": pause},
            {"program_id": f"p{i}", "turn": 1, "arrival_s": 2 * pause, "input_tokens": 20,
             "output_tokens": 5},
        ]  # fmt: skip
    src = tmp_path / "tools.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ingest([src], tmp_path / "trace.parquet")
    return tmp_path / "trace.parquet"


def test_each_tool_has_its_own_file_and_the_index_maps_it_back(tmp_path: Path) -> None:
    trace, folder = _trace(tmp_path), tmp_path / "plots"
    args = ["fit", str(trace), "-o", str(tmp_path / "fit.json"), "--plot", str(folder)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    index_path = folder / "index.json"
    assert f"and {len(TOOLS) + 1} plot(s) in {folder} (each one's tool: {index_path})" in (
        res.stderr
    )
    index = json.loads(index_path.read_text())
    files = index["tools"]
    assert index["global"] == "global.png" and sorted(files) == sorted(TOOLS)
    every = ["global.png", *files.values()]
    assert len({f.casefold() for f in every}) == len(every)  # apart, even ignoring case
    assert sorted(p.name for p in folder.iterdir()) == sorted([*every, "index.json"])
    assert all(len(f) <= 100 and f.isascii() and "/" not in f for f in every)
    # a safe name keeps its file, the first of two that differ only in case too
    assert (files["grep"], files["git_commit"], files["Bash"]) == (
        "grep.png",
        "git_commit.png",
        "Bash.png",
    )
    for tool in ("git/commit", "git commit", "bash", "global", "ünïcode", "日本", ".hidden"):
        digits = files[tool].removesuffix(".png").split("~")[1]
        assert len(digits) == 8 and set(digits) <= set("0123456789abcdef"), files[tool]
    # a tagged name's file is its own: the same in a fit without the others
    assert file_names(["git/commit", "日本"]) == {t: files[t] for t in ("git/commit", "日本")}


def test_a_name_windows_keeps_for_a_device_gets_its_hash() -> None:
    """``con.png``, ``NUL.png`` or ``com1.tar.png`` name a device on Windows, not a file: such
    a tool's file is its hashed form; a name that only starts like one keeps its own."""
    files = file_names(sorted(["con", "NUL", "com1.tar", "console", "lpt9", "lpt10"]))
    for device in ("con", "NUL", "com1.tar", "lpt9"):
        assert files[device].startswith(f"{device}~") and files[device].endswith(".png")
    assert files["console"] == "console.png" and files["lpt10"] == "lpt10.png"


def test_a_fit_drawn_again_into_the_folder_leaves_no_earlier_tools_plot(tmp_path: Path) -> None:
    """The folder holds what its index lists: an earlier fit's PNG of a tool this fit lacks
    is removed; files the index never listed (the user's) stay."""
    trace, folder = _trace(tmp_path), tmp_path / "plots"
    args = ["fit", str(trace), "-o", str(tmp_path / "fit.json"), "--plot", str(folder)]
    assert CliRunner().invoke(app, args).exit_code == 0
    (folder / "notes.png").write_bytes(b"mine")
    doc = json.loads((tmp_path / "fit.json").read_text())
    doc["tools"] = {t: e for t, e in doc["tools"].items() if t in ("grep", "Bash")}
    plot_fit(doc, folder)
    index = json.loads((folder / "index.json").read_text())
    assert sorted(index["tools"]) == ["Bash", "grep"]
    kept = sorted(p.name for p in folder.iterdir())
    assert kept == ["Bash.png", "global.png", "grep.png", "index.json", "notes.png"]
