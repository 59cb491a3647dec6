"""The error a simulation raises when it finds itself broken: a bug in the simulator (an
invariant of ``--check``, an engine that can make no progress, a router that chose no
replica), or a backend that disagrees with it (vLLM's scheduler changing the engine settings
it was built with). Never the user's input, which is refused before a simulation starts, as
a one-line error. Imports nothing: every part of the replay raises it.
"""

from __future__ import annotations


class SimulationError(RuntimeError):
    """The simulation broke an invariant or could not make progress (a bug), or a backend
    disagrees with the simulator."""
