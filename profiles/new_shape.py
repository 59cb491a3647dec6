"""A profile's new-size cost (``Profile.new_shape``): what an engine step costs on top the
first time the engine runs a step of that many tokens, as ``[tokens, extra seconds]``
points (measured by ``ttlctl profile --engine``, :mod:`profiles.server_new_shape`).

Measured on vLLM's CPU engine (the 55M test model, ``--enforce-eager``): a prefill of a
fresh prompt of a length the engine had not run took 18–65 ms longer than the same length
twice again (15 lengths from 301 to 1,711 tokens, engine-timed), then 14–42 ms (60 more
lengths, client-timed; no decay from the first to the last), the extra growing a little with
the length; a repeat of a length, even with a
different prompt, ran at its usual price. The engine builds its compute kernels for each
new step size once. A step's size is its scheduled tokens, whatever mix of prefill chunks
and decodes makes them. An engine that has served for long has run most sizes; one just
started has not. The simulator charges it once per size per engine
(:func:`replay.step_price.new_size_extra`), on engines that are told which sizes they have run.

Standard library only, as :mod:`profiles.schema`, which prices a size with
:func:`new_shape_s`, and :mod:`profiles.profile_read`, which reads the points with
:func:`~profiles.wake.wake_points` (the same shape).
"""

from __future__ import annotations

from collections.abc import Sequence

#: the points' shape, for a refusal's message
NEW_SHAPE_SHAPE = (
    "a list of [tokens, extra seconds] points, numbers, neither negative, tokens ascending"
)


def new_shape_s(points: Sequence[tuple[float, float]], tokens: int) -> float:
    """What a step of ``tokens`` scheduled tokens costs on top the first time the engine
    runs that size: linear between the measured points, the nearest end's beyond them (0
    without points)."""
    if not points or tokens <= 0:
        return 0.0
    x0, y0 = points[0]
    if tokens <= x0:
        return y0
    for x, y in points[1:]:
        if tokens <= x:
            return y0 + (y - y0) * (tokens - x0) / (x - x0)
        x0, y0 = x, y
    return y0
