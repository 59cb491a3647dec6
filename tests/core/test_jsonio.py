"""ttlctl/jsonio.py: the one atomic writer (text, bytes, JSON, a path others write to)."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest

from ttlctl.jsonio import (
    OutputError,
    check_writable,
    file_sha256,
    replacing,
    write_atomic,
    write_json,
)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_text_and_bytes_land_whole_with_the_usual_mode(tmp_path: Path) -> None:
    umask = os.umask(0o022)
    try:
        write_atomic("héllo\n", tmp_path / "a" / "t.txt")
        write_atomic(b"\x00\x01", tmp_path / "b.bin")
    finally:
        os.umask(umask)
    assert (tmp_path / "a" / "t.txt").read_bytes() == "héllo\n".encode()
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\x01"
    assert _mode(tmp_path / "b.bin") == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b.bin"]


def test_json_is_sorted_indented_and_refuses_nan_before_touching_the_file(tmp_path: Path) -> None:
    path = tmp_path / "doc.json"
    write_json({"b": 1, "a": "é"}, path)
    assert path.read_text(encoding="utf-8") == '{\n "a": "é",\n "b": 1\n}\n'
    with pytest.raises(ValueError):
        write_json({"x": float("nan")}, path)
    assert json.loads(path.read_text()) == {"a": "é", "b": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["doc.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "out.txt"
    write_atomic("old", path)
    with pytest.raises(RuntimeError), replacing(path) as tmp:
        tmp.write_text("half")
        raise RuntimeError("writer died")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_two_writers_never_share_a_temporary_name(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    with replacing(path) as one, replacing(path) as two:
        assert one != two and one.parent == two.parent == tmp_path
        one.write_text("1")
        two.write_text("2")
    assert path.read_text() == "1"  # the outer block ends last


def test_file_sha256(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    assert file_sha256(path) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def test_a_link_is_written_through_and_kept(tmp_path: Path) -> None:
    """Regression: the rename put a plain file where the link was and left the file it
    named as it was; now that file is replaced (atomically) and the link stays."""
    (tmp_path / "real.json").write_text("old")
    (tmp_path / "link.json").symlink_to("real.json")
    write_json({"a": 1}, tmp_path / "link.json")
    assert (tmp_path / "link.json").is_symlink()
    assert json.loads((tmp_path / "real.json").read_text()) == {"a": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "real.json"]


def test_a_named_pipe_is_refused_never_replaced(tmp_path: Path) -> None:
    """Regression: the writer renamed a plain file over a named pipe (and, as root, over
    a device such as /dev/full); now it refuses before writing anything."""
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    with pytest.raises(OutputError, match=rf"^{pipe}: is a named pipe, not a regular file"):
        write_atomic("x", pipe)
    assert stat.S_ISFIFO(pipe.stat().st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["pipe"]


@pytest.mark.parametrize("name", ["/dev/stdout", "/dev/stderr", "/dev/fd/1", "/proc/self/fd/1"])
def test_a_standard_stream_is_refused_before_anything_is_written(name: str) -> None:
    """Regression: `--json /dev/stdout >> all.jsonl` renamed a new file over all.jsonl
    (/dev/stdout leads through /proc/self/fd/1 to the redirect's file), exit 0, its
    contents gone. Refused, pointing at `-` (only checked: nothing is written here)."""
    with pytest.raises(OutputError, match=r"names a process's open stream.*give -"):
        check_writable(Path(name))


def test_a_link_to_a_standard_stream_is_refused(tmp_path: Path) -> None:
    link = tmp_path / "out.json"
    link.symlink_to("/dev/stdout")
    with pytest.raises(OutputError, match=re.escape(f"{link}: names a process's open stream")):
        check_writable(link)
    assert link.is_symlink() and os.readlink(link) == "/dev/stdout"


@pytest.mark.parametrize("name", ["/proc/123/fd/4", "/proc/thread-self/fd/2"])
def test_any_process_descriptor_is_a_stream(name: str) -> None:
    with pytest.raises(OutputError, match=r"names a process's open stream.*give -"):
        check_writable(Path(name))


@pytest.mark.parametrize("name", ["/proc/sys/kernel/hostname", "/proc/self/status", "/proc"])
def test_other_proc_paths_are_refused_as_the_kernels(name: str) -> None:
    """Regression: any path under /proc was refused as "names a process's open stream
    (standard output, a descriptor)", a file like /proc/self/status too: said as what it is."""
    with pytest.raises(OutputError, match=rf"^{re.escape(name)}: is under /proc, the kernel's"):
        check_writable(Path(name))
