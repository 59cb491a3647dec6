"""A path the system refuses by its name alone: a name in it longer than its file system
takes (255 bytes on ext4, XFS, btrfs, tmpfs: 128 letters é), or the whole path longer than
PATH_MAX. The system says so with ENAMETOOLONG wherever the path is used, and pathlib's
``is_file``, ``is_dir``, ``exists`` and ``is_symlink`` raise it (they return False only for
a missing file), so a command that asks them first would end in a traceback. Outputs are
refused before the work starts (:func:`ttlctl.jsonio.check_writable`), inputs where the
user's errors become one line (:func:`ttlctl.cli.kit.user_errors`); both in the words the
readers and writers use for any other OS error: ``cannot read (file name too long)``,
``cannot write here (file name too long)``.

Imports nothing of ttlctl (the bottom layer: the engine side's readers may use it).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

#: why such a path is refused, as ttlctl's messages quote an OS error (its strerror, lowered)
TOO_LONG = os.strerror(errno.ENAMETOOLONG).lower()


def name_too_long(exc: BaseException) -> bool:
    """Whether ``exc`` is the system refusing a path for its length (ENAMETOOLONG)."""
    return isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG


def too_long(path: Path) -> bool:
    """Whether the system refuses ``path`` for its length. It is asked (``lstat``, which
    reads no file), so each file system's own limit applies. Where a folder on the way is
    missing, the system stops there and says so instead: the names still to be made
    (what an output's writer would make) are held to the limit of the folder they would
    be made in. A path that cannot be reached for another reason is not too long (its
    use says why)."""
    try:
        os.lstat(path)
    except OSError as exc:
        if name_too_long(exc):
            return True
        return exc.errno == errno.ENOENT and _missing_too_long(path)
    except ValueError:  # a NUL byte in the path: not this module's to say
        return False
    return False


def _missing_too_long(path: Path) -> bool:
    """Whether a name of ``path`` below its nearest existing folder is longer than that
    folder's file system takes (``NAME_MAX``)."""
    here = Path(os.path.abspath(path))
    missing: list[str] = []
    while not os.path.lexists(here) and here != here.parent:
        missing.append(here.name)
        here = here.parent
    try:
        most = os.pathconf(here, "PC_NAME_MAX")
    except (OSError, ValueError):  # a limit the system does not state
        return False
    return any(len(os.fsencode(name)) > most for name in missing)
