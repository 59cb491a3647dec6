"""The cost model the simulator steps with: prefill, decode step and reload times.

A :class:`CostModel` answers three questions about one engine step; the
simulator's step time is their sum (a batch mixes prefill chunks and decodes, as
vLLM's chunked prefill does). It also prices a whole rebuild
(:meth:`CostModel.rebuild_s`), the one price the baselines, a bundle-less
continuum and the policy's benefit B use; for a profile it is
:meth:`profiles.schema.Profile.rebuild_prefill_s`, and the steps the simulator
charges for that rebuild sum to it exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from profiles.schema import Profile


class CostModel(Protocol):
    def prefill_s(self, context: int, chunk: int) -> float:
        """What ``chunk`` new tokens on top of ``context`` tokens already in KV add to a
        step (not the step's fixed cost)."""
        ...

    def rebuild_s(self, tokens: int, chunk: int) -> float:
        """Prefilling ``tokens`` from nothing on an idle engine, in prefill-only steps of at
        most ``chunk`` tokens: the sum of those steps' :meth:`step_s`."""
        ...

    def decode_s(self, seqs: int, kv_tokens: int) -> float:
        """One decode step for ``seqs`` sequences holding ``kv_tokens`` of KV in all."""
        ...

    def reload_s(self, tokens: int) -> float:
        """Bringing ``tokens`` of KV back from the host tier."""
        ...

    def decode_run_s(self, seqs: int, kv_tokens: int, steps: int) -> float:
        """``steps`` decode steps in a row, the KV growing by ``seqs`` tokens each."""
        ...

    def decode_steps_within(self, seqs: int, kv_tokens: int, seconds: float) -> int | None:
        """Most whole decode steps that fit in ``seconds`` (None: no closed form)."""
        ...

    def step_s(
        self, chunks: list[tuple[int, int]], seqs: int, kv_tokens: int, cached: int = 0
    ) -> float:
        """A whole step: prefill ``chunks`` (context, chunk) plus ``seqs`` decodes;
        ``cached``: the prompt tokens that requests whose first chunk this step computes
        found in the prefix cache (what admitting them still costs)."""
        ...

    def wake_s(self, idle_s: float) -> float:
        """What the first step after ``idle_s`` seconds with nothing to run costs beyond
        :meth:`step_s` (an engine settling after an idle spell)."""
        ...

    def new_shape_s(self, tokens: int) -> float:
        """What a step of ``tokens`` scheduled tokens costs beyond :meth:`step_s` the first
        time the engine runs that size (its kernels built for it)."""
        ...


@dataclass(frozen=True, slots=True)
class ProfileCostModel:
    """Costs from a :class:`~profiles.schema.Profile`.

    Prefilling ``chunk`` tokens after ``context`` costs the quadratic's increment,
    ``b·chunk + q·((context + chunk)² − context²)`` (attention of the new tokens
    over everything before them), or with ``per_context_pair_s`` measured, ``b·chunk +
    q·chunk² + per_context_pair_s·context·chunk`` (:meth:`Prefill.tokens_s`); a
    request's first chunk adds ``per_cached_token_s`` for each prompt token it found in
    the prefix cache. A step pays its fixed cost once: a step that
    prefills pays :attr:`Profile.prefill_fixed_s` (``a``, plus ``decode.step_s``
    when the prefill fit leaves the step out), a decode-only step ``step_s``;
    decodes in a step that prefills add only their own terms, and such a step
    costs at least what its decodes alone would (a whole-step profile whose ``a``
    is below ``step_s``, as a roofline's is, would otherwise make a decode step
    cheaper by adding a small chunk to it).
    """

    profile: Profile
    #: the fixed cost of a step that prefills (Profile.prefill_fixed_s), kept for step_s
    _fixed: float = field(init=False, repr=False, compare=False)
    #: Prefill.per_context_pair_s, kept for step_s (None: the quadratic's increments)
    _pair: float | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_fixed", self.profile.prefill_fixed_s)
        object.__setattr__(self, "_pair", self.profile.prefill.per_context_pair_s)

    def prefill_s(self, context: int, chunk: int) -> float:
        return self.profile.prefill.tokens_s(context, chunk)

    def rebuild_s(self, tokens: int, chunk: int) -> float:
        return self.profile.rebuild_prefill_s(tokens, chunk)

    def decode_s(self, seqs: int, kv_tokens: int) -> float:
        if seqs <= 0:
            return 0.0
        d = self.profile.decode
        return d.step_s + d.per_seq_s * seqs + d.per_kv_token_s * kv_tokens

    def reload_s(self, tokens: int) -> float:
        return self.profile.reload_s(tokens)

    def decode_run_s(self, seqs: int, kv_tokens: int, steps: int) -> float:
        if seqs <= 0 or steps <= 0:
            return 0.0
        d = self.profile.decode
        # Σ_{i<steps} (step + per_seq·seqs + per_kv·(kv + i·seqs)), in closed form
        kv_sum = steps * kv_tokens + seqs * steps * (steps - 1) / 2
        return steps * (d.step_s + d.per_seq_s * seqs) + d.per_kv_token_s * kv_sum

    def decode_steps_within(self, seqs: int, kv_tokens: int, seconds: float) -> int | None:
        if seqs <= 0 or seconds <= 0:
            return 0
        d = self.profile.decode
        # decode_run_s(k) = A·k² + B·k with A = c·seqs/2, B = step + per_seq·seqs + c·(kv − seqs/2)
        a = d.per_kv_token_s * seqs / 2
        b = d.step_s + d.per_seq_s * seqs + d.per_kv_token_s * (kv_tokens - seqs / 2)
        if a <= 0:
            return int(seconds // b) if b > 0 else None
        k = (-b + math.sqrt(b * b + 4 * a * seconds)) / (2 * a)
        return max(0, int(k))

    def step_s(
        self, chunks: list[tuple[int, int]], seqs: int, kv_tokens: int, cached: int = 0
    ) -> float:
        if not chunks:
            return self.decode_s(seqs, kv_tokens)
        p = self.profile.prefill
        total = self._fixed  # the step's fixed cost, once (Profile.prefill_fixed_s)
        pair = self._pair
        if pair is None:
            for context, chunk in chunks:  # Prefill.tokens_s, inlined: the hottest sum
                end = context + chunk
                total += p.b * chunk + p.q * (end * end - context * context)
        else:
            for context, chunk in chunks:
                total += p.b * chunk + (p.q * chunk + pair * context) * chunk
        if seqs:
            d = self.profile.decode
            decodes = d.per_seq_s * seqs + d.per_kv_token_s * kv_tokens
            total += decodes
            if total < d.step_s + decodes:  # never cheaper than its decodes alone
                total = d.step_s + decodes
        # admitting what was found cached: work beside the step's passes, never in its floor
        return total + p.per_cached_token_s * cached if cached else total

    def wake_s(self, idle_s: float) -> float:
        return self.profile.wake_s(idle_s)

    def new_shape_s(self, tokens: int) -> float:
        return self.profile.new_shape_s(tokens)


@dataclass(frozen=True, slots=True)
class ConstantCostModel:
    """Fixed per-token costs: enough to start a simulator, and easy to reason about in tests."""

    prefill_per_token_s: float = 1e-4
    decode_step_s: float = 0.02
    reload_per_token_s: float = 1e-6

    def prefill_s(self, context: int, chunk: int) -> float:
        return self.prefill_per_token_s * chunk

    def rebuild_s(self, tokens: int, chunk: int) -> float:
        if tokens <= 0:
            return 0.0
        return self.prefill_per_token_s * tokens + self.decode_step_s * -(-tokens // max(1, chunk))

    def decode_s(self, seqs: int, kv_tokens: int) -> float:
        return self.decode_step_s if seqs > 0 else 0.0

    def reload_s(self, tokens: int) -> float:
        return self.reload_per_token_s * tokens

    def decode_run_s(self, seqs: int, kv_tokens: int, steps: int) -> float:
        return self.decode_step_s * steps if seqs > 0 and steps > 0 else 0.0

    def decode_steps_within(self, seqs: int, kv_tokens: int, seconds: float) -> int | None:
        if seqs <= 0 or seconds <= 0:
            return 0
        return int(seconds // self.decode_step_s)

    def step_s(
        self, chunks: list[tuple[int, int]], seqs: int, kv_tokens: int, cached: int = 0
    ) -> float:
        return sum(self.prefill_s(c, n) for c, n in chunks) + (
            self.decode_step_s if (seqs or chunks) else 0.0
        )

    def wake_s(self, idle_s: float) -> float:
        return 0.0

    def new_shape_s(self, tokens: int) -> float:
        return 0.0


def rebuild_pricer(cost: CostModel, chunk: int) -> Callable[[float, bool], float]:
    """PrefillReload (docs/method.md) as a policy without a bundle takes it: a reload when
    a host tier holds the KV, else :meth:`CostModel.rebuild_s` in steps of ``chunk``
    (the engine's ``max_num_batched_tokens``)."""

    def rebuild(tokens: float, offload: bool) -> float:
        return cost.reload_s(int(tokens)) if offload else cost.rebuild_s(int(tokens), chunk)

    return rebuild
