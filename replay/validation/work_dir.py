"""A validation's work dir: the one given, or a temporary one that a refusal leaves behind
only when something was written in it.

A run refused once its work dir exists (a damaged bundle, a ``--url`` server that does not
answer) would otherwise leave an empty ``/tmp/ttlctl-validate-*`` folder per try. A
temporary folder the run wrote into is kept, refused or not: it holds what the message
names (a server's log) or what the document names (the cold-start bundle, the arrivals).
A folder given with ``--work-dir`` is the user's and is never removed.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from profiles.schema import ProfileDoc
from ttlctl import bundle_make
from ttlctl.bundle_doc import Bundle


@contextmanager
def work_dir(given: Path | None, prefix: str) -> Iterator[Path]:
    """``given`` (absolute), else a fresh temporary folder named ``prefix…``, removed if
    the block fails while it is still empty."""
    if given is not None:
        yield given.resolve()
        return
    made = Path(tempfile.mkdtemp(prefix=prefix)).resolve()
    try:
        yield made
    except BaseException:
        if not any(made.iterdir()):
            made.rmdir()
        raise


def cold_start_bundle(folder: Path, profile: ProfileDoc) -> tuple[Path, Bundle]:
    """The bundle continuum runs on without ``--bundle`` (no fit, ``profile``'s prices),
    written in the work dir ``folder``: its path and document (one server's and a fleet's
    alike)."""
    path = folder / "cold-start-bundle.json"
    doc = bundle_make.cold_start(profile, "ttlctl validate (cold start: no fit)")
    bundle_make.write(doc, path)
    return path, doc
