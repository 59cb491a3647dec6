"""fitting: the maths of the TTL policy, pure and file-free (the bottom layer).

:mod:`fitting.cdf` (empirical CDFs, their compression, exponential fits),
:mod:`fitting.eta` (η, online and offline), :mod:`fitting.hull` (τ* over a CDF),
:mod:`fitting.policy` (the online policy the simulator and the engine share),
:mod:`fitting.fit` (a trace's frame → the fit document) and :mod:`fitting.percentile`.
Nothing here reads a file or a clock; the engine plugin imports ``policy``, ``hull``
and ``eta``, which use the standard library only.
"""

#: the schema id of a fit document (``ttlctl fit``; the ``fit`` of a bundle)
FIT_SCHEMA = "ttlctl.fit/1"
