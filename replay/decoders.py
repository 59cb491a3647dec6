"""Running requests in their decode phase, advanced together.

Every decode step gives each decoding request one token, so their state is a
function of one counter ``D`` (decode steps taken): a member that joined at
``d0`` with ``c0`` computed tokens has ``c0 + D − d0`` now. Only two things are
per request: when it next needs a KV block (every ``block_size`` tokens) and when
it finishes; both wait in heaps. A step then costs O(log n) per block boundary
and per finish instead of O(n) per step.

State is written back to a request (:meth:`DecodeSet.sync`) whenever anyone
needs to read it: at finish, preemption, or when a policy asks.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from replay.request import SimRequest


@dataclass(slots=True)
class DecodeSet:
    block_size: int
    D: int = 0
    members: dict[int, SimRequest] = field(default_factory=dict)
    _sum_c0: int = 0
    _sum_d0: int = 0
    #: heap entries are (D, rid, membership epoch): an entry from an earlier membership
    #: of the same request (it left, was preempted, joined again) is stale
    _finish: list[tuple[int, int, int]] = field(default_factory=list)
    _blocks: list[tuple[int, int, int]] = field(default_factory=list)
    _epoch: int = 0

    def __len__(self) -> int:
        return len(self.members)

    def join(self, r: SimRequest) -> None:
        r.dec = True
        r.d0, r.c0, r.g0 = self.D, r.computed, r.generated
        self._epoch += 1
        r.epoch = self._epoch
        self.members[r.rid] = r
        self._sum_c0 += r.c0
        self._sum_d0 += r.d0
        heapq.heappush(self._finish, (self._finish_at(r), r.rid, r.epoch))
        heapq.heappush(self._blocks, (self._block_at(r), r.rid, r.epoch))

    def sync(self, r: SimRequest) -> None:
        """Write the request's current token counts back to it."""
        if not r.dec:
            return
        k = self.D - r.d0
        if k:
            r.c0 += k
            r.g0 += k
            r.d0 = self.D
            self._sum_c0 += k
            self._sum_d0 += k
        r.computed = r.c0
        r.generated = r.g0
        r.num_tokens = r.computed + 1

    def leave(self, r: SimRequest) -> None:
        self.sync(r)
        r.dec = False
        del self.members[r.rid]
        self._sum_c0 -= r.c0
        self._sum_d0 -= r.d0

    def clear(self) -> list[SimRequest]:
        """Sync and drop every member (heaps too); returns them."""
        out = list(self.members.values())
        for r in out:
            self.leave(r)
        self._finish.clear()
        self._blocks.clear()
        return out

    def kv_tokens(self) -> int:
        """Computed tokens of all members now."""
        return self._sum_c0 + len(self.members) * self.D - self._sum_d0

    def _finish_at(self, r: SimRequest) -> int:
        return r.d0 + r.output - r.g0

    def block_step(self, r: SimRequest) -> int:
        """The D of the step in which ``r`` needs its next block."""
        return self._block_at(r)

    def _block_at(self, r: SimRequest) -> int:
        return r.d0 + r.blocks * self.block_size - r.c0

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
            if at is None or at > self.D:
                return done
            _, rid, _ = heapq.heappop(self._finish)
            done.append(self.members[rid])

    def pop_block_due(self, before: int) -> SimRequest | None:
        """A member needing a new block in a step that starts before ``before``."""
        while self._blocks:
            at, rid, epoch = self._blocks[0]
            r = self.members.get(rid)
            if r is None or r.epoch != epoch or at != self._block_at(r):
                heapq.heappop(self._blocks)
                continue
            if at >= before:
                return None
            heapq.heappop(self._blocks)
            return r
        return None

    def block_granted(self, r: SimRequest) -> None:
        """``r`` got one more block: schedule its next boundary."""
        r.blocks += 1
        heapq.heappush(self._blocks, (self._block_at(r), r.rid, r.epoch))

    def push_back(self, r: SimRequest) -> None:
        heapq.heappush(self._blocks, (self._block_at(r), r.rid, r.epoch))
