"""vLLM v1's KV block pool for agent programs: prefix caching, LRU free list, runs of blocks.

Mirrors ``vllm/v1/core/block_pool.py`` and ``kv_cache_manager.py`` (0.32) as far
as agent programs exercise them:

- blocks of ``block_size`` tokens; a full block is hashed from its chain, so a
  program's next call, which repeats the previous prompt and output, hits every
  full block of that stream up to the point where it diverges;
- the free list (``FreeKVCacheBlockQueue``) hands blocks out from its head. Freed
  blocks that have a hash (full blocks) go to its tail, a request's in reverse (its
  last block nearest the head, evicted first); freed blocks without one (a request's
  partial last block) go to its head, reused first (``BlockPool.free_blocks``: LIFO
  for uncached blocks, LRU for cached ones). A cached block is evicted only when the
  free list hands it out again;
- a hit touches the blocks (takes them off the free list) before new blocks are
  allocated, and is capped at ``num_tokens − 1`` (the last token is recomputed);
- a pin (the plugin's deferred free, :mod:`ttlctl.engine.pins`) keeps a finished
  request's blocks referenced: :meth:`KVPool.pin`. The program's next call shares the
  pinned blocks of its hit (``touch`` of blocks still referenced: nothing leaves the
  free list for them) and allocates its new blocks while the pin still holds the rest;
  :meth:`KVPool.unpin` then frees what the call did not take.

Two pools implement one interface: :class:`RunPool`, which keeps runs of a
program's consecutive blocks as one entry (fast), and :class:`BlockPool`, which
keeps every block (the reference the tests compare it, and vLLM's own
``BlockPool``, with).

Shared prefixes (:meth:`replay.workload.Call.block_keys`): a call whose prompt starts
with blocks other programs share passes their keys. Those blocks are kept one by one,
as vLLM keeps every block: a key may have several cached copies (vLLM does not
de-duplicate: a request that computes a block another request cached meanwhile caches
its own copy), a hit takes the oldest copy still cached (``get_one_block``), a copy is
referenced by every running request and pin that holds it and goes to the free list's
tail when the last one lets go (a request's shared blocks after its own ones, each in
reverse: ``free_blocks(reversed(blocks))``). A shared block is cached as soon as it is
allocated full (:meth:`KVPool.cache_full`, vLLM's ``cache_blocks`` in
``allocate_slots``), so another program can hit it in the same step. The program's own
blocks follow its shared ones: they hit only while the call's shared keys are the same
as when they were cached (in vLLM their hashes chain on the shared ones).

Deliberate differences from vLLM, neither of which changes eviction order or hit
lengths: a program's own chain has one identity per block index, and when a new call
diverges from the cached stream (fewer reused tokens than cached) the blocks past the
divergence keep their place in the free list but lose their identity here (vLLM
keeps a hash nothing will ever match again), so handing them out again is not
counted as an eviction.

The package, one concept a module (named after vLLM's ``vllm/v1/core`` files they
correspond to):

- :mod:`~replay.kv.interface`: what the simulator asks of a pool (:class:`KVPool`),
  the shared keys of a call, a pin's record, :class:`OutOfBlocks`;
- :mod:`~replay.kv.run_pool`: :class:`RunPool`, runs of consecutive blocks as one
  entry (what the simulator runs), assembled from parts: its free list
  (:mod:`~replay.kv.run_free`), prefix lookup (:mod:`~replay.kv.run_lookup`), shared
  copies (:mod:`~replay.kv.run_shared`) and pins (:mod:`~replay.kv.run_pins`), on what
  they share (:mod:`~replay.kv.run_state`);
- :mod:`~replay.kv.block_pool`: :class:`BlockPool`, every block on its own (the
  reference, vLLM's ``block_pool.py`` with ``kv_cache_utils.py``'s free queue).
"""

from replay.kv.block_pool import BlockPool
from replay.kv.interface import Keys, KVPool, OutOfBlocks
from replay.kv.run_pool import RunPool

__all__ = ["BlockPool", "KVPool", "Keys", "OutOfBlocks", "RunPool"]
