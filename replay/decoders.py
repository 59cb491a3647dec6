"""Running requests in their decode phase, advanced together.

Every decode step gives each decoding request one token, so their state is a
function of one counter, D = ``decode_steps`` (decode steps taken): a member last
synced at step d0 (``synced_step``) with c0 computed tokens
(``synced_computed_tokens``) has ``c0 + D − d0`` now. Only two things are per
request, and neither needs a per-step walk:

- when it finishes: a heap of finish steps;
- when it needs a KV block: to run step ``D`` a member holding ``c`` computed
  tokens needs ⌈(c + 1) / block size⌉ blocks, one more than it holds exactly when
  ``c`` is a multiple of the block size, that is when ``c0 − d0 + D`` is. Members
  are kept in buckets by ``(c0 − d0) mod block size`` (their phase), so the members
  needing a block in step ``D`` are one bucket, and the blocks a run of steps needs
  is a sum over at most ``block size`` buckets.

The pool hands the members' blocks out by count (:meth:`KVPool.take`); a member's
own count is written back, and its blocks assigned to its program
(:meth:`KVPool.assign`), whenever anyone needs to read its state
(:meth:`DecodeSet.sync`): at finish, preemption, or when a policy asks.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from replay.kv import KVPool
from replay.math_utils import cdiv
from replay.request import SimRequest


@dataclass(slots=True)
class DecodeSet:
    block_size: int
    pool: KVPool
    #: decode steps taken (D in the maths above)
    decode_steps: int = 0
    members: dict[int, SimRequest] = field(default_factory=dict)
    _sum_synced_computed_tokens: int = 0
    _sum_synced_steps: int = 0
    #: heap entries are (D, rid, membership epoch): an entry from an earlier membership
    #: of the same request (it left, was preempted, joined again) is stale
    _finish: list[tuple[int, int, int]] = field(default_factory=list)
    #: members by phase, ``(c0 − d0) mod block_size``
    _phase: list[dict[int, SimRequest]] = field(init=False)
    #: members per phase, twice over and backwards: entry ``block_size − 1 − φ`` (and that
    #: plus ``block_size``) counts phase φ, so the steps D, D+1, … (phases falling by one
    #: each) read a contiguous slice
    _back: list[int] = field(init=False)
    _epoch: int = 0

    def __post_init__(self) -> None:
        self._phase = [{} for _ in range(self.block_size)]
        self._back = [0] * (2 * self.block_size)

    def __len__(self) -> int:
        return len(self.members)

    def join(self, r: SimRequest) -> None:
        """``r`` decodes from now on; it holds ⌈computed / block size⌉ blocks."""
        r.decoding = True
        r.synced_step = self.decode_steps
        r.synced_computed_tokens = r.num_computed_tokens
        r.synced_generated = r.generated
        self._epoch += 1
        r.epoch = self._epoch
        self.members[r.rid] = r
        self._sum_synced_computed_tokens += r.synced_computed_tokens
        self._sum_synced_steps += r.synced_step
        heapq.heappush(self._finish, (self._finish_at(r), r.rid, r.epoch))
        phase = (r.synced_computed_tokens - r.synced_step) % self.block_size
        self._phase[phase][r.rid] = r
        back = self.block_size - 1 - phase
        self._back[back] += 1
        self._back[back + self.block_size] += 1

    def sync(self, r: SimRequest) -> None:
        """Write the request's current token and block counts back to it (its blocks
        taken since are assigned to its program)."""
        if not r.decoding:
            return
        k = self.decode_steps - r.synced_step
        if k:
            r.synced_computed_tokens += k
            r.synced_generated += k
            r.synced_step = self.decode_steps
            self._sum_synced_computed_tokens += k
            self._sum_synced_steps += k
        r.num_computed_tokens = r.synced_computed_tokens
        r.generated = r.synced_generated
        r.num_tokens = r.num_computed_tokens + 1
        blocks = cdiv(r.synced_computed_tokens, self.block_size)
        if blocks != r.blocks:
            self.pool.assign(r.program, blocks - r.blocks)
            r.blocks = blocks

    def leave(self, r: SimRequest) -> None:
        self.sync(r)
        r.decoding = False
        del self.members[r.rid]
        phase = (r.synced_computed_tokens - r.synced_step) % self.block_size
        del self._phase[phase][r.rid]
        back = self.block_size - 1 - phase
        self._back[back] -= 1
        self._back[back + self.block_size] -= 1
        self._sum_synced_computed_tokens -= r.synced_computed_tokens
        self._sum_synced_steps -= r.synced_step

    def clear(self) -> list[SimRequest]:
        """Sync and drop every member (the finish heap too); returns them."""
        out = list(self.members.values())
        for r in out:
            self.leave(r)
        self._finish.clear()
        return out

    def kv_tokens(self) -> int:
        """Computed tokens of all members now."""
        return (
            self._sum_synced_computed_tokens
            + len(self.members) * self.decode_steps
            - self._sum_synced_steps
        )

    def _finish_at(self, r: SimRequest) -> int:
        return r.synced_step + r.output - r.synced_generated

    def next_finish(self) -> int | None:
        """The D at which the first member finishes (its last token is sampled)."""
        while self._finish:
            at, rid, epoch = self._finish[0]
            r = self.members.get(rid)
            if r is not None and r.epoch == epoch and at == self._finish_at(r):
                return at
            heapq.heappop(self._finish)
        return None

    def pop_finished(self) -> list[SimRequest]:
        """Members whose last token was sampled by the steps taken (D reached)."""
        done: list[SimRequest] = []
        while True:
            at = self.next_finish()
            if at is None or at > self.decode_steps:
                return done
            _, rid, _ = heapq.heappop(self._finish)
            done.append(self.members[rid])

    def due(self) -> list[SimRequest]:
        """The members that need one more block to run the next step (step D)."""
        bucket = self._phase[-self.decode_steps % self.block_size]
        return list(bucket.values()) if bucket else []

    def blocks_for(self, steps: int, free: int) -> tuple[int, int]:
        """(s, blocks): the most steps s ≤ ``steps`` from D on whose block needs ``free``
        blocks meet, and the blocks those s steps need."""
        n = len(self.members)
        bs = self.block_size
        if not n:
            return steps, 0
        # every block_size steps each member needs exactly one block
        cycles = min(steps // bs, free // n)
        s, blocks = cycles * bs, cycles * n
        rest = steps - s
        if rest < bs:  # the remaining steps' needs at once (phases D+s, D+s+1, …)
            start = bs - 1 - (-(self.decode_steps + s) % bs)
            need = sum(self._back[start : start + rest])
            if blocks + need <= free:
                return steps, blocks + need
        back, d = self._back, self.decode_steps + s
        while s < steps:  # the pool runs dry within the next block_size steps
            need = back[bs - 1 - (-d % bs)]
            if blocks + need > free:
                break
            blocks += need
            s += 1
            d += 1
        return s, blocks
