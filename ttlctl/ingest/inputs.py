"""Which files an ingest reads: the files and folders named, folders walked, documentation
skipped.

A folder is walked whole, in name order, less hidden files and folders; a file in it that is
documentation (a README, a LICENSE, a ``.md`` …, gzip or not) is listed as skipped, never
read. A file reached twice (a folder and a file or folder inside it) is read once. A path
that does not exist is an :class:`~ttlctl.ingest.rejects.IngestError`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ttlctl.ingest.rawfile import GZIP_SUFFIX
from ttlctl.ingest.rejects import IngestError

#: Files in a directory that are documentation, not logs: listed as skipped, never read.
NOT_LOGS = ("license", "licence", "readme", "notice", "copying", "authors")
NOT_LOG_SUFFIXES = (".md", ".rst", ".txt", ".html", ".py", ".sh")


def expand(paths: Iterable[Path]) -> tuple[list[Path], list[Path]]:
    """(files to read, documentation files skipped) for the given files and directories;
    a file reached twice (a folder and a file or folder inside it) is read once."""
    files: list[Path] = []
    skipped: list[Path] = []
    seen: set[Path] = set()

    def add(file: Path, to: list[Path]) -> None:
        real = file.resolve()
        if real not in seen:
            seen.add(real)
            to.append(file)

    for path in paths:
        if path.is_dir():
            for child in sorted(p for p in path.rglob("*") if p.is_file()):
                rel_parts = child.relative_to(path).parts
                if any(part.startswith(".") for part in rel_parts):
                    continue
                add(child, skipped if _is_doc(child) else files)
        elif path.exists():
            add(path, files)
        else:
            raise IngestError(path, None, "no such file or directory")
    return files, skipped


def _is_doc(path: Path) -> bool:
    name = path.name.lower().removesuffix(GZIP_SUFFIX)  # README.md.gz is documentation too
    return name.startswith(NOT_LOGS) or name.endswith(NOT_LOG_SUFFIXES)
