"""The vLLM backend of the replay: vLLM's own v1 scheduler, KV cache manager and block pool.

``ttlctl replay --backend vllm`` runs the installed vLLM's ``Scheduler`` (or
``AsyncScheduler``) for the policies ``vllm`` and ``unlimited-kv``, and ttlctl's
``TTLScheduler`` exactly as a server loads it for ``program-fcfs``, ``static-ttl``
and ``continuum``, in this process, with no model weights, no worker and no
server. A stand-in executor returns each scheduled request's next token and a
virtual clock advances by the profile's price of the step vLLM scheduled (the fast
backend's cost model). Programs run in closed loop as in the fast backend.

One concept per module:

- :mod:`.shared`: what this package takes from the fast simulator (one place);
- :mod:`.backend`: the backends by name, what the vLLM one accepts (no vLLM import);
- :mod:`.build`: vLLM's config, KV cache config and scheduler, as the engine core
  builds them;
- :mod:`.bundles`: the bundle that makes the plugin run a replay policy;
- :mod:`.tokens`: token streams (prefix reuse exactly as the workload says);
- :mod:`.executor`: the stand-in model executor and the step's price;
- :mod:`.batch_queue`: the engine core's batch queue (one step in flight, or two
  async): the harness and each fleet replica step through it;
- :mod:`.harness`: the engine core's step loop (sync and async) on a virtual clock;
- :mod:`.sends`: what the harness sends to the engine, and when (programs, pauses, aborts);
- :mod:`.sent_call`: a call's vLLM ``Request`` and what the harness keeps of it;
- :mod:`.step_timer`: the wall and CPU time of the scheduler's calls, when asked;
- :mod:`.outcome`: per-call records and engine figures;
- :mod:`.run`: one policy on one workload (:func:`replay.vllmsim.run.run`);
- :mod:`.prompts`: every call's prompt in a fleet, and a replica's KV events;
- :mod:`.engine`: vLLM's scheduler as one replica of the fleet loop (``--replicas N``);
- :mod:`.fleet`: one policy on a fleet of vLLM schedulers behind a router.

Only :mod:`.shared` and :mod:`.backend` load without vLLM.
"""
