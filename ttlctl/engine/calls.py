"""What the pin rules keep about one call (a request) between its arrival and its finish."""

from __future__ import annotations

from dataclasses import dataclass

from ttlctl.engine.tags import Tags


@dataclass(slots=True)
class Live:
    """One call from its arrival to its finish (:class:`~ttlctl.engine.retention.Retention`).

    ``program_start`` and ``program_seq`` come from the program book (the program's
    first arrival and its order), so they restart after the book forgot the program;
    ``seq`` is the call's own arrival order. ``request`` is the glue's own object for
    the call (the simulator's request; None in the plugin), opaque to the rules: a τ
    source may read it.
    """

    tags: Tags
    #: seconds on the glue's clock
    arrival: float
    program_start: float
    seq: int
    #: arrival order of the program's first call (ties in program_start)
    program_seq: int = 0
    #: its program's previous call finished and no pin was alive at this arrival
    returned_unpinned: bool = False
    admitted: bool = False
    cached_tokens: int | None = None
    first_token_unix_s: float | None = None
    #: the pin made at finish (0: none); None when no τ source is loaded
    ttl_s: float | None = None
    #: why a pin the policy chose was not made: ``refused`` (the pin cap) or ``deferred``
    #: (vLLM defers freeing the blocks); None: made, or none chosen
    pin_skipped: str | None = None
    request: object | None = None
