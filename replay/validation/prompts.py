"""Prompts of fresh random token ids, for the requests validate sends outside a replay
(neighbours kept busy, warm-ups): never a prefix hit, so each one prefills."""

from __future__ import annotations

import random

#: token ids drawn from [FIRST_ID, FIRST_ID + span) (low ids: in every vocabulary)
FIRST_ID = 100
#: the widest span drawn from (a large vocabulary's rare ids are not needed)
MOST_IDS = 32000


def id_span(vocab_size: int | None) -> int:
    """How many ids prompts draw from, for a vocabulary of ``vocab_size`` (None: 1,000)."""
    return max(1, min(vocab_size or 1000, MOST_IDS) - FIRST_ID)


def random_prompt(rng: random.Random, tokens: int, span: int) -> list[int]:
    """``tokens`` ids drawn from ``rng`` in [FIRST_ID, FIRST_ID + span)."""
    return [FIRST_ID + rng.randrange(span) for _ in range(tokens)]
