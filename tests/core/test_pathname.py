"""ttlctl.pathname: a path the system refuses for its length, asked of the system."""

from __future__ import annotations

import errno
from pathlib import Path

from ttlctl.pathname import TOO_LONG, name_too_long, too_long

LONG = "é" * 200  # 400 bytes: more than any usual file system's 255


def test_a_long_name_is_too_long_wherever_it_is_in_the_path(tmp_path: Path) -> None:
    assert too_long(tmp_path / LONG)
    assert too_long(tmp_path / LONG / "x.json")  # a folder on the way
    # below a folder still to be made: held to the limit of the folder it would be made in
    assert too_long(tmp_path / "new" / LONG / "x.json")
    assert too_long(Path("/" + "a/" * 3000))  # the whole path past PATH_MAX


def test_other_paths_are_not_too_long(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    assert not too_long(tmp_path / "file")
    assert not too_long(tmp_path / "new" / "x.json")  # missing: its use says so
    assert not too_long(tmp_path / "file" / "x.json")  # under a file: its use says so
    assert not too_long(tmp_path / ("a" * 255))


def test_the_error_is_named_in_the_words_of_an_os_error() -> None:
    assert TOO_LONG == "file name too long"
    assert name_too_long(OSError(errno.ENAMETOOLONG, "File name too long"))
    assert not name_too_long(OSError(errno.ENOENT, "No such file or directory"))
    assert not name_too_long(ValueError("x"))
