"""What a request says about itself: program, tool, last call.

Clients tag requests with ``vllm_xargs`` (``program_id``, ``tool``, ``is_last``),
which vLLM hands to the scheduler as ``request.sampling_params.extra_args``; the
``X-Session-ID`` header (``request.session_id``) stands in for ``program_id``.
Values from HTTP may arrive as strings: ``is_last`` accepts 0/1, booleans and
"true"/"false".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@dataclass(frozen=True, slots=True)
class Tags:
    #: None: untagged traffic (a one-call program, never pinned)
    program: str | None
    tool: str | None
    #: None when the client did not say
    is_last: bool | None


def parse_flag(value: Any) -> bool | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return value != 0
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value)
    return text if text else None


def _tool(value: Any) -> str | None:
    """A tool's name without the blanks around it; a blank one names no tool (as ingest
    reads the engine log: a bundle fitted on ``bash`` is asked for ``bash``, not
    `` bash``)."""
    if value is None:
        return None
    return str(value).strip() or None


def parse(extra_args: Mapping[str, Any] | None, session_id: str | None = None) -> Tags:
    args = extra_args or {}
    program = _text(args.get("program_id")) or _text(session_id)
    return Tags(program, _tool(args.get("tool")), parse_flag(args.get("is_last")))


def of_request(request: Any) -> Tags:
    """Tags of a vLLM ``Request`` (duck-typed: ``sampling_params``, ``session_id``)."""
    params = getattr(request, "sampling_params", None)
    extra = getattr(params, "extra_args", None) if params is not None else None
    session = getattr(request, "session_id", None)
    return parse(extra if isinstance(extra, Mapping) else None, session)
