"""The bundles a command replaced, kept beside the bundle, and ``ttlctl bundle rollback``.

``ttlctl tune``, ``ttlctl refit`` and ``ttlctl bundle build`` write a bundle over an
existing file in place (a server watching it reloads it). Before they do, the file they
replace is kept in a folder beside it (docs/deploy.md#rolling-back):

    bundle.json                      the bundle in service
    bundle.json.history/
        000007-93db8b8ada84.json     the newest bundle replaced (sequence, sha256[:12])
        000006-1c0ffee00d5e.json
        …                            at most :data:`KEEP` of them; older ones are removed
        rolled-back.json             the bundle the last rollback took out of service

:func:`rollback` puts the newest kept bundle back over the served file atomically (a
rename: the plugin's watcher sees a new inode and reloads it) and removes it from the
history, so a second rollback goes one further back. The bundle it takes out of service
is kept as ``rolled-back.json`` (one file, replaced by the next rollback).

Standard library only, like :mod:`ttlctl.bundle`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from ttlctl import bundle, bundle_make
from ttlctl.bundle_doc import Bundle, BundleError
from ttlctl.errors import os_reason
from ttlctl.filekind import BUNDLE, document_kind
from ttlctl.jsonfile import JsonFileError, read_json_object
from ttlctl.jsonio import OutputError, write_atomic

#: bundles kept per served file (the newest ones)
KEEP = 5
#: the folder beside ``bundle.json``: ``bundle.json.history``
SUFFIX = ".history"
#: the bundle the last rollback replaced
ROLLED_BACK = "rolled-back.json"
_ENTRY = re.compile(r"^(\d{6,})-([0-9a-f]{12}|unsealed)\.json$")


@dataclass(frozen=True, slots=True)
class Entry:
    """One kept bundle: its place in the history (higher is newer) and its file."""

    seq: int
    path: Path


@dataclass(frozen=True, slots=True)
class Restored:
    """What :func:`rollback` did: the bundle now served, and where the one it replaced went."""

    bundle: Bundle
    replaced: Path | None
    left: int


def folder(path: Path) -> Path:
    """The history folder of the bundle at ``path``: ``<path>.history`` beside it."""
    return path.with_name(path.name + SUFFIX)


def entries(path: Path) -> list[Entry]:
    """The kept bundles of ``path``, oldest first."""
    where = folder(path)
    if not where.is_dir():
        return []
    found = []
    for item in where.iterdir():
        match = _ENTRY.match(item.name)
        if match is not None and item.is_file():
            found.append(Entry(int(match.group(1)), item))
    return sorted(found, key=lambda e: e.seq)


def keep(path: Path, previous: bytes | None = None) -> Path | None:
    """Keep the bundle at ``path`` (its current bytes, or ``previous`` when the caller read
    them before replacing it) as the newest history entry, and drop entries beyond
    :data:`KEEP`. Nothing is kept when there is nothing (no file: a first write) or when
    the newest entry holds the same bytes. Returns the entry."""
    if previous is None:
        previous = current(path)
        if previous is None:
            return None
    entry, _ = _add(path, previous)
    _prune(path)
    return entry


def _add(path: Path, previous: bytes) -> tuple[Path, bool]:
    """The history entry holding ``previous`` (the newest one when it holds the same
    bytes, else a new one), and whether it is new."""
    kept = entries(path)
    if kept and kept[-1].path.read_bytes() == previous:
        return kept[-1].path, False
    seq = kept[-1].seq + 1 if kept else 1
    entry = folder(path) / f"{seq:06d}-{_short_sha(previous)}.json"
    try:
        write_atomic(previous, entry)
    except (OSError, OutputError) as exc:
        raise BundleError(f"{entry}: cannot keep the bundle replaced: {_reason(exc)}") from None
    return entry, True


def _prune(path: Path) -> None:
    """Drop the entries beyond :data:`KEEP` (the oldest)."""
    for old in entries(path)[:-KEEP]:
        old.path.unlink(missing_ok=True)


def current(path: Path) -> bytes | None:
    """The bytes of the file at ``path``; None when there is no file to keep (none, or a
    folder: writing over it fails with its own message)."""
    if not path.is_file():
        return None
    try:
        return path.read_bytes()
    except OSError as exc:
        raise BundleError(f"{path}: cannot read the bundle it replaces: {os_reason(exc)}") from None


def replace(doc: Bundle, path: Path, previous: bytes | None = None) -> Path | None:
    """Write ``doc`` over ``path`` atomically, keeping what it replaced (:func:`keep`: the
    file's bytes read first, or ``previous``). Returns the history entry (None: nothing
    was there). Both or neither: a bundle that cannot be kept stops the write (nothing
    changed), and a failed write takes back the entry it made."""
    if previous is None:
        previous = current(path)
    if previous is None:
        bundle_make.write(doc, path)
        return None
    entry, new = _add(path, previous)
    try:
        bundle_make.write(doc, path)
    except BaseException:
        if new:
            entry.unlink(missing_ok=True)
        raise
    _prune(path)
    return entry


def rollback(path: Path) -> Restored:
    """Put the newest kept bundle back over ``path`` (atomically) and take it out of the
    history; the bundle it replaces is kept as ``rolled-back.json``. A
    :class:`~ttlctl.bundle_doc.BundleError` when there is nothing to roll back to (naming
    ``path`` as missing when neither it nor a history exists, and saying what it is when
    it is no bundle: a folder, a trace, a fit), or when the kept bundle does not verify
    (then nothing is changed). A served file removed since is restored from its history
    all the same."""
    if path.is_dir():  # `rollback DIR`: not a bundle whose history is empty
        raise BundleError(f"{path}: is a directory, not a bundle")
    kept = entries(path)
    if not kept and not path.exists():  # a typo, not a bundle without a history
        raise BundleError(f"{path}: no such file")
    if not kept:
        none_kept = (
            f"no earlier bundle to roll back to ({folder(path)} holds none: "
            "tune, refit and bundle build keep the bundle they replace there)"
        )
        try:
            bundle.read(path)  # a trace or a fit given by mistake: said so, not "no history"
        except BundleError as exc:
            if not _damaged_bundle(path):
                raise
            # the case a rollback is for, but there is nothing to restore: both said
            raise BundleError(f"{exc}; and {none_kept}") from None
        raise BundleError(f"{path}: {none_kept}")
    newest = kept[-1]
    doc = bundle.read(newest.path)  # names the entry when it is damaged; nothing changed
    replaced: Path | None = folder(path) / ROLLED_BACK
    try:
        current = path.read_bytes()
    except FileNotFoundError:
        replaced = None
    except OSError as exc:
        raise BundleError(f"{path}: cannot read the bundle in service: {os_reason(exc)}") from None
    try:
        if replaced is not None:
            write_atomic(current, replaced)
        write_atomic(newest.path.read_bytes(), path)
    except (OSError, OutputError) as exc:  # the served file is as it was (a rename or not)
        raise BundleError(
            f"{path}: cannot roll back to {newest.path.name}: {_reason(exc)}"
        ) from None
    try:
        newest.path.unlink()
    except OSError as exc:  # restored, but a second rollback would restore it again
        raise BundleError(
            f"{path}: rolled back to {newest.path.name}, but cannot take it out of the "
            f"history ({os_reason(exc)}); remove it before rolling back further"
        ) from None
    return Restored(bundle=doc, replaced=replaced, left=len(kept) - 1)


def _damaged_bundle(path: Path) -> bool:
    """Whether ``path``, which the bundle reader refused, is a bundle damaged or edited
    (its bytes not JSON, or a bundle's document that does not verify), not another file
    given by mistake (a trace, a fit, a profile, any other JSON)."""
    try:
        doc = read_json_object(path, "a bundle")
    except JsonFileError as exc:
        return exc.damaged
    return document_kind(doc) == BUNDLE


def _short_sha(data: bytes) -> str:
    """The kept bundle's own ``sha256`` field (first 12), as ``bundle verify`` prints it;
    ``unsealed`` for a file without one (it is kept all the same: rollback verifies)."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return "unsealed"
    sha = doc.get("sha256") if isinstance(doc, dict) else None
    if isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha):
        return sha[:12]
    return "unsealed"


def _reason(exc: OSError | OutputError) -> str:
    """Why a write failed: an output refused says it in full (it names its path), an OS
    error as every message quotes one (:func:`~ttlctl.errors.os_reason`)."""
    return str(exc) if isinstance(exc, OutputError) else os_reason(exc)
