"""The one error of a validation a user can act on."""

from __future__ import annotations

from ttlctl.errors import TtlctlError


class ValidateError(TtlctlError, ValueError):
    """Bad arguments, servers that cannot be compared, or one that cannot be profiled:
    one line."""
