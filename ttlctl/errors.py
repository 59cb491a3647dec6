"""The errors a user can act on, under one base class.

A :class:`TtlctlError` is bad input, a bad argument or setting, or a server that
cannot be used; its message is one line for the user, naming the file and
record, the value or the URL. ``ttlctl`` prints it and exits with status 2, in
one place (:func:`ttlctl.cli.kit.user_errors`). Anything else that escapes a
command is a bug and keeps its traceback.

Nothing is imported here, so every layer may derive its errors from this module
(it sits below ``fitting`` and ``profiles``).
"""

from __future__ import annotations


class TtlctlError(Exception):
    """Bad input, arguments or settings, or an unusable server: a one-line message."""


class ConfigError(TtlctlError, ValueError):
    """A setting out of range or unknown; the message names it."""


class FlagError(ConfigError):
    """The value of one flag refused: the message is ``FLAG: WHY``; ``why`` alone is for a
    caller whose user gave that value another way (a bundle's router section, which
    ``validate --router bundle`` names instead of the flag)."""

    def __init__(self, flag: str, why: str) -> None:
        super().__init__(f"{flag}: {why}")
        self.flag = flag
        self.why = why

    def __reduce__(self) -> tuple[type[FlagError], tuple[str, str]]:
        # made again from its two parts (pickled across processes, copied)
        return (type(self), (self.flag, self.why))


def os_reason(exc: OSError) -> str:
    """An operating-system error as ttlctl's one-line messages quote it: its ``strerror``
    in lower case ("no such file or directory"); one raised without an errno says what it
    was given, else its class's name."""
    if exc.strerror:
        return exc.strerror.lower()
    return str(exc) or type(exc).__name__
