"""The bundle the engine serves with, reloaded when its file changes.

``TTLCTL_BUNDLE`` names the file. At start it is read with
:func:`ttlctl.bundle.load_policy`, which never raises: no bundle, or a damaged
one, means stock vLLM and one warning. Afterwards :meth:`BundleWatcher.poll`
looks at the file's modification time, size and inode at most every ``every_s``
seconds (one ``stat`` call) and reloads when they change. A damaged new file
keeps the policy in force and warns once per change; a good one replaces it
(the new policy starts from the new bundle's fit; what the old one learned
online is dropped with it).

A bundle's policy prices a miss in steps of the serving engine's
``max_num_batched_tokens`` (``chunk``, from the scheduler's vLLM config), not the
budget its profile was measured with (:func:`ttlctl.bundle.policy_from`).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fitting.policy import TTLPolicy
from ttlctl.bundle import load_policy, open_policy
from ttlctl.bundle_doc import Bundle, BundleError

ENV_BUNDLE = "TTLCTL_BUNDLE"
ENV_EVERY = "TTLCTL_BUNDLE_CHECK_S"
DEFAULT_EVERY_S = 2.0


def _signature(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _every_s(given: str | None, warn: Callable[[str], None]) -> float:
    """``TTLCTL_BUNDLE_CHECK_S``: a finite number of seconds >= 0 (0: at every poll);
    anything else warns once, naming the value, and the default holds (as
    ``TTLCTL_MAX_PROGRAMS`` does: the server keeps running)."""
    if given is None or not given.strip():
        return DEFAULT_EVERY_S
    try:
        every = float(given)
    except ValueError:
        every = math.nan
    if math.isfinite(every) and every >= 0:
        return every
    warn(
        f"ttlctl: {ENV_EVERY}={given!r} is not a number of seconds >= 0; "
        f"checking the bundle every {DEFAULT_EVERY_S:g} s"
    )
    return DEFAULT_EVERY_S


@dataclass(slots=True)
class BundleWatcher:
    path: str | None
    warn: Callable[[str], None]
    info: Callable[[str], None]
    every_s: float = DEFAULT_EVERY_S
    #: the engine's step budget (``max_num_batched_tokens``) a rebuild is priced in
    chunk: int | None = None
    policy: TTLPolicy | None = None
    doc: Bundle | None = None
    #: how many times a new file replaced the policy
    reloads: int = 0
    #: how many bundle files were refused (at start, or a change that did not verify)
    refused: int = 0
    _signature: tuple[int, int, int] | None = None
    _next_check: float = field(default=float("-inf"))

    @staticmethod
    def from_env(
        env: dict[str, str] | os._Environ[str],
        warn: Callable[[str], None],
        info: Callable[[str], None],
        chunk: int | None = None,
    ) -> BundleWatcher:
        path = env.get(ENV_BUNDLE) or None
        every = _every_s(env.get(ENV_EVERY), warn)
        watcher = BundleWatcher(path, warn, info, every_s=every, chunk=chunk)
        watcher.load_initial()
        return watcher

    def load_initial(self) -> None:
        if self.path is not None:
            self._signature = _signature(self.path)
        self.policy, self.doc = load_policy(self.path, self.warn, self.chunk)
        if self.policy is None and self.path is not None:
            self.refused += 1
        if self.policy is not None:
            self.info(f"ttlctl: serving with bundle {self.path} ({self._describe()})")

    def _describe(self) -> str:
        if self.policy is None:
            return "none"
        p = self.policy.params
        pins = "pins" if p.pins else "no pins"
        return f"{pins}, valve {p.valve}, pin cap {p.pin_cap:g}, eta {p.eta:g}"

    def poll(self, now: float) -> bool:
        """Reload if the file changed (checked at most every ``every_s``); True if reloaded."""
        if self.path is None or now < self._next_check:
            return False
        self._next_check = now + self.every_s
        signature = _signature(self.path)
        if signature == self._signature:
            return False
        self._signature = signature
        if signature is None:
            self.warn(f"ttlctl: bundle {self.path} disappeared; keeping the policy in force")
            return False
        try:
            policy, doc = open_policy(Path(self.path), self.chunk)
        except BundleError as exc:
            self.refused += 1
            kept = "the policy in force" if self.policy is not None else "stock vLLM"
            self.warn(f"ttlctl: new bundle refused, keeping {kept}: {exc}")
            return False
        self.policy, self.doc = policy, doc
        self.reloads += 1
        self.info(f"ttlctl: bundle {self.path} reloaded ({self._describe()})")
        return True
