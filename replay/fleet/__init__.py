"""A fleet of simulated engines behind a router (``replay --replicas N --router R``).

- :mod:`replay.fleet.routers`: one module per router model, each a port of a real
  router's rule (vllm-router 0.1.17, SGLang's gateway) or ttlctl's ``pin-aware``;
- :mod:`replay.fleet.prompts`: what a router reads of a call (its prompt as content runs);
- :mod:`replay.fleet.loop`: the event loop (one clock for the router and every replica),
  its stages one module each: :mod:`~replay.fleet.events` (the clock),
  :mod:`~replay.fleet.routing` (a call routed), :mod:`~replay.fleet.arrival` (a call
  reaching its replica), :mod:`~replay.fleet.stepping` (a replica's steps),
  :mod:`~replay.fleet.finishing` (a step's calls finished), over the parts they share
  (:mod:`~replay.fleet.parts`: :mod:`~replay.fleet.replica`, :mod:`~replay.fleet.view`,
  :mod:`~replay.fleet.streams`, :mod:`~replay.fleet.books`, :mod:`~replay.fleet.clients`);
- :mod:`replay.fleet.engine`: what the loop uses of a replica's engine (the fast
  backend's, or vLLM's scheduler: :mod:`replay.vllmsim.fleet`);
- :mod:`replay.fleet.metrics`: what a fleet reports beyond the single-engine figures;
- :mod:`replay.fleet.run`: one policy's fleet replay, as ``replay`` and ``tune`` call it.
- :mod:`replay.fleet.asked`: the fleet a command asked for (``--replicas``, ``--router``
  and its flags), checked.
"""
