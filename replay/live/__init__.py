"""Live replay: a trace's agent programs against a running vLLM server.

What ``ttlctl replay --live URL`` and ``ttlctl validate`` run. Each program is
replayed in closed loop, as the simulator does (``replay/sim.py``): its next call
is sent when the previous one has finished plus the recorded pause (capped by
``idle_gap_cap_s``, AIPerf's ``--trace-idle-gap-cap-seconds``).

Prompts are token ids, built so that the server's prefix cache sees what the
trace recorded: call ``k`` repeats the first ``reused_tokens`` of call ``k-1``'s
prompt followed by the token ids the server generated for it, then fresh token
ids up to the recorded input length. A call longer than the server's
``max_model_len`` (or KV cache) is clipped and counted.

Measured per call (client clock): send, first token, each streamed chunk,
finish, and the server's ``usage.prompt_tokens_details.cached_tokens`` (needs
``--enable-prompt-tokens-details``). ``/metrics`` is read before and after the
run (prefix-cache queries and hits, preemptions, ``ttlctl:pins_*``) and sampled
during it (KV usage, waiting requests, ``ttlctl:pinned_blocks``). The prefix
cache is reset first (``POST /reset_prefix_cache``, which needs
``VLLM_SERVER_DEV_MODE=1``; one warning when absent). Everything said to the
server goes through its door, :mod:`ttlctl.server`.

The package, one concept a module:

- :mod:`~replay.live.runner`: one run start to end (:func:`run_live`) and
  ``replay --live`` (:func:`live_results`);
- :mod:`~replay.live.driver`: the closed loop, in threads;
- :mod:`~replay.live.trimming`: the programs a run sends (first ``n``, pauses
  capped, calls clipped to the server);
- :mod:`~replay.live.records`: what is measured per call and per program;
- :mod:`~replay.live.sampler`: the server's gauges during the run;
- :mod:`~replay.live.result`: the figures, under the simulator's result keys;
- :mod:`~replay.live.vllm_bench` and :mod:`~replay.live.aiperf`: the exports (vLLM's
  benchmark result JSON, AIPerf's ``profile_export.jsonl`` records).
"""

from replay.live.aiperf import aiperf_record, write_records
from replay.live.records import LiveCallRecord, ProgramRecord
from replay.live.result import summarize
from replay.live.runner import LiveError, live_results, run_live
from replay.live.trimming import cap_pauses, clip, first_programs
from replay.live.vllm_bench import benchmark_result, check_result_flags, result_name

__all__ = [
    "LiveCallRecord",
    "LiveError",
    "ProgramRecord",
    "aiperf_record",
    "benchmark_result",
    "cap_pauses",
    "check_result_flags",
    "clip",
    "first_programs",
    "live_results",
    "result_name",
    "run_live",
    "summarize",
    "write_records",
]
