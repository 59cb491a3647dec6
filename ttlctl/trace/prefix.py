"""Shared-prefix block keys: a trace's chained block hashes at an engine's block size.

A trace's ``prefix_hashes`` name its leading blocks of ``prefix_block_tokens`` tokens,
chained (equal hashes: equal tokens from the start up to the end of that block). Engine
block ``k`` ends at token ``e = (k + 1) * block_size``; its key is ``((h, b), e)`` with ``h``
the hash of the trace block holding token ``e - 1`` and ``b`` the trace's block size: equal
keys mean equal tokens up to ``e`` whatever the two block sizes (docs/trace-format.md,
"Shared prefixes"). The same hash at another trace block size (two sources ingested into one
trace, whose small integer hashes collide) is another prefix. Only full engine blocks inside
the hashed prefix get keys.
"""

from __future__ import annotations

from collections.abc import Sequence

#: one shared block: ((trace hash, trace block size), end token)
SharedKey = tuple[tuple[int, int], int]


def shared_keys(hashes: Sequence[int], block_tokens: int, block_size: int) -> tuple[SharedKey, ...]:
    """The keys of every full engine block of ``block_size`` tokens inside the prefix."""
    end = len(hashes) * block_tokens // block_size * block_size
    return tuple(
        ((hashes[(e - 1) // block_tokens], block_tokens), e)
        for e in range(block_size, end + 1, block_size)
    )
