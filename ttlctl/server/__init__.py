"""The one door to a vLLM server: everything ttlctl says to a server, and how it runs one.

Talking to a running server (the engine profiler, live replay, validate, tune --live):

- :mod:`~ttlctl.server.client`: one HTTP request, text and JSON answers, every
  failure a one-line :class:`~ttlctl.server.client.ServerError` naming the URL;
- :mod:`~ttlctl.server.sse`: streamed completions, chunk by chunk as they arrive;
- :mod:`~ttlctl.server.prom`: ``/metrics`` (Prometheus text): series, labels,
  counters and their deltas;
- :mod:`~ttlctl.server.facts`: what the server is (:func:`~ttlctl.server.facts.probe`:
  model, ``max_model_len``, KV cache, version, whether it runs the TTL scheduler);
- :mod:`~ttlctl.server.vocab`: token ids for random prompts, from the served
  model's vocabulary;
- :mod:`~ttlctl.server.cache`: ``POST /reset_prefix_cache``.

Running one (serve, validate, the tests' servers):

- :mod:`~ttlctl.server.command`: the command line and environment of a stock or a
  TTL-scheduler server, built once;
- :mod:`~ttlctl.server.vllm_options` and :mod:`~ttlctl.server.vllm_config`: a server's
  vLLM arguments as vLLM's parser reads them (which option an argument sets, abbreviations
  included; the options a ``--config`` file adds), for the checks made before it starts;
- :mod:`~ttlctl.server.process`: launching it in a session of its own, finding its
  processes by group, stopping the whole group;
- :mod:`~ttlctl.server.owned`: a server started for a run and stopped after it
  (:class:`~ttlctl.server.owned.OwnedServer`); :mod:`~ttlctl.server.foreground`: one
  run in the foreground until it exits (``ttlctl serve``);
- :mod:`~ttlctl.server.signals`: SIGTERM and SIGHUP as an exception while a server is
  owned, so that no server outlives the command that started it.

Code that runs an engine in process (its workers in child processes) can use the same
pieces: ``with signals.held():`` makes SIGTERM unwind its stack as Ctrl-C does, so its
shutdown runs; :func:`~ttlctl.server.process.launch`,
:func:`~ttlctl.server.process.group_members` and
:func:`~ttlctl.server.process.stop_group` work for any command. Standard library only
(and PyYAML, vLLM's dependency, where a ``--config`` file is read).
"""
