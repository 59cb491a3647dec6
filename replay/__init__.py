"""replay: agent programs through a model of vLLM's scheduler, or through a real server.

:mod:`replay.workload` (programs from a trace), :mod:`replay.request`,
:mod:`replay.kv`, :mod:`replay.offload` and :mod:`replay.scheduler` (vLLM 0.32's step),
:mod:`replay.sim` (the event loop; what it returns in :mod:`replay.sim_outcome`, the
``--check`` invariants in :mod:`replay.invariants`), :mod:`replay.policies`,
:mod:`replay.figures` and :mod:`replay.policy_runs` (every policy on one workload:
``ttlctl replay``); :mod:`replay.live` (the same programs against a server),
:mod:`replay.validation` (simulator against server: ``ttlctl validate``),
:mod:`replay.synth` (with :mod:`replay.synth_workloads` and :mod:`replay.fit_context`:
``ttlctl synth``) and :mod:`replay.tune` (``ttlctl tune``). See docs/architecture.md.
"""
