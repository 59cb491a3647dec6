"""Files on disk: atomic writes, JSON documents and file hashes.

Every file ttlctl writes whole (a trace, a fit, a bundle, a replay result, a report,
an export) goes through :func:`replacing`: it is written to a fresh temporary file
beside the target (a unique name, so two writers never share one), flushed to disk,
given the usual file mode and renamed over the target. A reader sees the old file
or the new one, never half of one; a failed write leaves no temporary file behind.

A symbolic link is followed: its target is replaced so, and the link kept. A path that
exists and is not a regular file (a named pipe, a device, a socket) is refused, never
renamed over (which would put a plain file where it was: as root, a device node of
/dev): an output is written whole before it appears, and some commands read back what
they wrote (ingest summarises its trace), neither of which a pipe or a device allows.
Standard output is ``-`` where a flag takes it (``--json -``).

A path that cannot be written is an :class:`OutputError` naming it (never the temporary
file); :func:`check_writable` and :func:`check_folder` find it before any work starts, a
path with too long a name among them (:mod:`ttlctl.pathname`).

Standard library only (and :mod:`ttlctl.errors`, :mod:`ttlctl.pathname`): the engine side
imports it (through :mod:`ttlctl.bundle`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypedDict

from ttlctl.errors import TtlctlError, os_reason
from ttlctl.pathname import TOO_LONG, too_long


class OutputError(TtlctlError):
    """An output path that cannot be written; the message names it and says why."""


class FileRef(TypedDict):
    """A file a document was made from, as documents record it: its path and SHA-256."""

    path: str
    sha256: str


@contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write; renamed over ``path`` on a clean exit.

    Whoever writes the temporary file must have closed it when the block ends; it is
    then synced to disk and renamed. On an exception it is removed and ``path`` is
    left as it was. A symbolic link's target is written (the link kept); a path that is
    no regular file is refused (:func:`landing`).
    """
    shown, path = path, landing(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise OutputError(f"{shown}: cannot write here ({os_reason(exc)})") from None
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the usual mode
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.filename in (name, str(path)):  # the temporary file's or the rename's
            raise OutputError(f"{shown}: cannot write ({os_reason(exc)})") from None
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def landing(path: Path) -> Path:
    """The file that writing ``path`` replaces: ``path``, or the file a symbolic link
    names (made if it does not exist), so that the link is kept. Refused, as an
    :class:`OutputError` naming ``path``: a directory, and anything else that is no
    regular file (a named pipe, a device, a socket), which replacing would destroy; a
    path with too long a name (:func:`refuse_too_long`)."""
    reached = _stream_kind(path)
    if reached == "stream":
        raise OutputError(
            f"{path}: names a process's open stream (standard output, a descriptor), not a "
            f"file; outputs are written whole and renamed into place ({_STDOUT})"
        )
    if reached == "proc":
        raise OutputError(
            f"{path}: is under /proc, the kernel's view of its processes, not a file to write "
            f"(give a file's path; {_STDOUT})"
        )
    refuse_too_long(path)
    try:
        mode = path.stat().st_mode  # through links: what a write would reach
    except FileNotFoundError:  # a new file, or a link to one
        mode = None
    except OSError as exc:  # a link that loops, a path under a file ...
        if not os.path.islink(path):
            return path  # the write says why, naming it
        raise OutputError(f"{path}: cannot follow this link ({os_reason(exc)})") from None
    if mode is not None and stat.S_ISDIR(mode):
        raise OutputError(f"{path}: is a directory, not a file to write")
    if mode is not None and not stat.S_ISREG(mode):
        raise OutputError(
            f"{path}: is {_kind(mode)}, not a regular file; outputs are written whole and "
            f"renamed into place, which would replace it (give a file's path; {_STDOUT})"
        )
    return Path(os.path.realpath(path)) if path.is_symlink() else path


#: where a standard stream is asked for instead
_STDOUT = "for standard output give -, where the flag takes it"
#: paths that name a process's open files, not files: /dev/stdout leads through
#: /proc/self/fd/1 to whatever the shell redirected it to, which a rename would replace
_STREAM_PATHS = ("/dev/stdout", "/dev/stderr", "/dev/stdin", "/dev/fd/")
#: a process's descriptors under /proc (``/proc/self/fd/1``, ``/proc/123/fd/4``)
_PROC_FD = re.compile(r"/proc/[^/]+/fd(/|$)")


def _stream_kind(path: Path) -> str | None:
    """Whether ``path``, or a link on the way from it, names a process's open stream
    (``"stream"``: a standard stream or a descriptor) or something else under /proc
    (``"proc"``); None: neither."""
    here = os.path.abspath(path)
    for _ in range(40):  # as many links as the system follows
        if here.startswith(_STREAM_PATHS) or here == "/dev/fd" or _PROC_FD.match(here):
            return "stream"
        if here == "/proc" or here.startswith("/proc/"):
            return "proc"
        if not os.path.islink(here):
            return None
        here = os.path.abspath(os.path.join(os.path.dirname(here), os.readlink(here)))
    return None  # a loop: the caller's stat says so


def _kind(mode: int) -> str:
    """What a path that is no regular file nor directory is, in words."""
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def check_writable(path: Path) -> None:
    """Refuse an output file that cannot be written, before any work: a directory, a
    named pipe, a device or another path that is no regular file (:func:`landing`), a
    path under a file, a folder without write permission. A symbolic link is checked
    where it leads. The folder is probed by making and removing a file in it
    (permission bits say nothing for root, nor on a read-only mount); nothing is created
    or left behind."""
    target = landing(path)
    _probe(_existing_ancestor(target.parent, path), path)


def check_folder(path: Path) -> None:
    """Refuse an output folder that cannot be written (see :func:`check_writable`)."""
    refuse_too_long(path)
    if path.exists() and not path.is_dir():
        raise OutputError(f"{path}: not a directory")
    _probe(_existing_ancestor(path, path), path)


def refuse_too_long(path: Path) -> None:
    """Refuse an output whose path the system refuses for its length (a name in it longer
    than its file system takes: :func:`ttlctl.pathname.too_long`), in the words a failed
    write uses, before pathlib's checks raise on it."""
    if too_long(path):
        raise OutputError(f"{path}: cannot write here ({TOO_LONG})")


def _existing_ancestor(folder: Path, path: Path) -> Path:
    """The nearest existing folder at or above ``folder`` (what would be created below)."""
    here = folder.absolute()
    while not here.exists():
        here = here.parent
    if not here.is_dir():
        raise OutputError(f"{path}: {here} is not a directory")
    return here


def _probe(folder: Path, path: Path) -> None:
    try:
        fd, name = tempfile.mkstemp(prefix=".ttlctl-probe.", dir=folder)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write in {folder} ({os_reason(exc)})") from None
    os.close(fd)
    os.unlink(name)


def write_atomic(data: str | bytes, path: Path) -> None:
    """Write ``data`` (text as UTF-8): the file is whole or absent, never half-written."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with replacing(path) as tmp:
        tmp.write_bytes(raw)


def write_json(doc: Any, path: Path) -> None:
    """Write ``doc`` as JSON (keys sorted, one-space indent, UTF-8, no NaN), atomically."""
    text = json.dumps(doc, indent=1, sort_keys=True, ensure_ascii=False, allow_nan=False)
    write_atomic(text + "\n", path)


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def names_file(ref: object, sha256: str | None) -> bool | None:
    """Whether ``ref``, a document's record of a file it was made from (a :class:`FileRef`,
    or a fit's ``input``), names the file whose SHA-256 is ``sha256``; None when either is
    unknown (no record, a record without a hash, no file to compare it with)."""
    recorded = ref.get("sha256") if isinstance(ref, dict) else None
    if not isinstance(recorded, str) or sha256 is None:
        return None
    return recorded == sha256
