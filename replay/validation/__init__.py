"""Simulator against a real server: the same trace, the same policies, the errors per metric.

``ttlctl validate`` replays one small trace twice per policy: in the simulator
(``replay.policy_runs.run_one``) and live against a vLLM server
(:func:`replay.live.run_live`), then compares mean and p95 JCT, mean TTFT, the
prefix-hit rate and preemptions, and whether the policies rank the same. The policy
lives in the server process, so each policy needs its own server:

- ``vllm``: stock vLLM (its own scheduler);
- ``continuum``: vLLM with ``--scheduler-cls ttlctl.engine.TTLScheduler`` and
  ``TTLCTL_BUNDLE`` (the bundle given, else a cold-start bundle: no fit, the
  default policy and the measured profile).

Either give a URL per policy (servers already running) or a base command that
starts one (``--engine-cmd``, or ``--model`` and vLLM arguments): validate then
starts the servers itself, one after the other (vllm, then continuum), and stops
each one's whole process group after its run (and on Ctrl-C, SIGTERM, an error or
a timeout).

The simulator is sized like the server; the profile that prices each step, unless one
is given, is measured on the first policy's server after each of its live runs and the
``repeats`` measurements pooled into one (:mod:`~replay.validation.fleet_profile`).

A live run is one draw of a noisy system: when calls arrive a few milliseconds
apart the cache evicts differently, and under contention the prefix-hit rate of
the same trace ranged from 25% to 36% across seven runs here. ``repeats`` runs
each policy that many times, each in a fresh server (so the TTL scheduler starts
from the bundle again, as the simulator does), and compares the simulator with the
mean of the runs; the rows also carry the runs' range.

The package, one concept a module: :mod:`~replay.validation.setup` (the command's run:
:func:`validation_doc`), :mod:`~replay.validation.validate_request` (what the command asks:
:class:`ValidateRequest`), :mod:`~replay.validation.server_sources` (where its servers come
from), :mod:`~replay.validation.crosscheck` (:func:`validate`),
:mod:`~replay.validation.live_session` (its live runs, one server at a time),
:mod:`~replay.validation.servers` (a server per policy),
:mod:`~replay.validation.sizing` (the simulator sized like the servers),
:mod:`~replay.validation.stats` (the pure statistics: errors, merged runs, rankings, goals),
:mod:`~replay.validation.server_doc` (each policy simulated and judged into the document: the
one path of validate and ``validate --resimulate``), :mod:`~replay.validation.fleet`
(:func:`~replay.validation.fleet.validate_fleet`, ``--replicas``: its routers, placement,
live runs, simulated side and document in the ``fleet_*`` modules),
:mod:`~replay.validation.error`.
"""

from replay.validation.crosscheck import validate
from replay.validation.error import ValidateError
from replay.validation.servers import LIVE_POLICIES, Sources, server_command, server_environment
from replay.validation.sizing import sim_engine_config
from replay.validation.stats import COMPARED, compare, merge_runs, ranking, same_ranking

__all__ = [
    "COMPARED",
    "LIVE_POLICIES",
    "Sources",
    "ValidateError",
    "compare",
    "merge_runs",
    "ranking",
    "same_ranking",
    "server_command",
    "server_environment",
    "sim_engine_config",
    "validate",
]
