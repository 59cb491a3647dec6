"""Which files an ingest reads: the files and folders named, folders walked, documentation
and the command's own outputs skipped.

A folder is walked whole, in name order, less hidden files and folders; a file in it that is
documentation (a README, a LICENSE, a ``.md`` …, gzip or not) is listed as skipped, never
read; so is one of the command's own outputs (its trace, rejects file or ``--json``, written
into the folder by an earlier run), which would otherwise be read as a log of its own. A
file reached twice (a folder and a file or folder inside it) is read once. An entry of a folder
walked that is neither a file nor a folder walked (a broken link, a link to a folder, which the
walk does not follow, a named pipe) is listed as not read, with what it is: never dropped
unsaid. A path that does not exist is an :class:`~ttlctl.ingest.rejects.IngestError`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from ttlctl.ingest.rawfile import GZIP_SUFFIX
from ttlctl.ingest.rejects import IngestError

#: Files in a directory that are documentation, not logs: listed as skipped, never read.
NOT_LOGS = ("license", "licence", "readme", "notice", "copying", "authors")
NOT_LOG_SUFFIXES = (".md", ".rst", ".txt", ".html", ".py", ".sh")


class Found(NamedTuple):
    """What :func:`expand` found: the files to read, and those skipped."""

    files: list[Path]
    #: documentation files in a folder walked
    docs: list[Path]
    #: the command's own outputs in a folder walked
    outputs: list[Path]
    #: entries of a folder walked that are not files read: (entry, what it is)
    others: list[tuple[Path, str]]


def expand(paths: Iterable[Path], outputs: Iterable[Path] = ()) -> Found:
    """The files to read in the given files and directories, and those skipped in a
    directory walked (documentation, and ``outputs``: the command's own); a file reached
    twice (a folder and a file or folder inside it) is read once."""
    found = Found([], [], [], [])
    ours = {path.resolve() for path in outputs}
    seen: set[Path] = set()

    def add(file: Path, to: list[Path]) -> None:
        real = file.resolve()
        if real not in seen:
            seen.add(real)
            to.append(file)

    for path in paths:
        if path.is_dir():
            for child in sorted(path.rglob("*")):
                rel_parts = child.relative_to(path).parts
                if any(part.startswith(".") for part in rel_parts):
                    continue
                if child.is_file():
                    add(child, _kind(child, ours, found))
                elif (what := _not_read(child)) is not None:
                    found.others.append((child, what))
        elif path.exists():
            add(path, found.files)
        else:
            raise IngestError(path, None, "no such file or directory")
    return found


def _kind(child: Path, ours: set[Path], found: Found) -> list[Path]:
    """The list of ``found`` a file in a directory walked belongs to."""
    if child.resolve() in ours:
        return found.outputs
    return found.docs if _is_doc(child) else found.files


def _not_read(entry: Path) -> str | None:
    """What an entry of a folder walked that is not a file is, when it is not a folder the
    walk enters (None for those): the walk does not follow a link to a folder (a link to a
    parent would walk forever), and a broken link or a pipe holds no log to read."""
    if entry.is_symlink():
        return "a link to a folder, not followed" if entry.is_dir() else "a broken link"
    return None if entry.is_dir() else "not a regular file"


def _is_doc(path: Path) -> bool:
    name = path.name.lower().removesuffix(GZIP_SUFFIX)  # README.md.gz is documentation too
    return name.startswith(NOT_LOGS) or name.endswith(NOT_LOG_SUFFIXES)
