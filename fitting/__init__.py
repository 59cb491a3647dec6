"""fitting: the maths of the TTL policy, pure and file-free (the bottom layer).

:mod:`fitting.cdf` (empirical CDFs, their compression, exponential fits),
:mod:`fitting.eta` (η, online and offline), :mod:`fitting.hull` (τ* over a CDF),
:mod:`fitting.policy` (the online policy the simulator and the engine share; its knobs
:mod:`fitting.policy_params`, what it knows of a tool's durations :mod:`fitting.durations`),
:mod:`fitting.fit` (a trace's frame → the fit document) and :mod:`fitting.percentile`.
Nothing here reads a file or a clock; the engine plugin imports ``policy``,
``policy_params``, ``durations``, ``hull`` and ``eta``, which use the standard library only.
"""

#: the schema id of a fit document (``ttlctl fit``; the ``fit`` of a bundle)
FIT_SCHEMA = "ttlctl.fit/1"
