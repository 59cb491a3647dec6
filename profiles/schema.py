"""A device profile: what rebuilding a context costs on the target hardware.

One JSON document (``ttlctl.profile/1``): its types and the value objects it becomes,
with their prices; reading and checking one is :mod:`profiles.profile_read`. Standard
library only: the engine process reads the profile inside the policy bundle.

- ``prefill``: seconds to prefill ``c`` tokens of context, ``a + b·c + q·c²``,
  with the measured points it was fitted on and the fit's error, and
  ``includes_step``, what those seconds are: ``true``, a whole prefill-only
  engine step (``a`` holds the fixed cost every step pays: a forward pass timed
  alone, a TTFT, a roofline's declared formula); ``false``, what the tokens add
  to a step on top of ``decode.step_s`` (a fit on engine steps that took the
  step's fixed cost out first, as ``profiles/measure_vllm.py`` does). A profile
  written before the field existed reads as ``false`` when its ``source`` holds
  ``prefill_steps`` (only the vLLM step profiler wrote that), else ``true``.
  ``per_cached_token_s`` (optional, 0 when absent): what each prompt token a
  request finds in the prefix cache still costs when it is admitted — the
  server reading the prompt and the engine hashing its blocks, work a cache hit
  does not save. A fit on fresh prompts folds that work into ``b``; a prefill
  on top of a cached prefix pays it on the cached tokens too (measured by
  ``ttlctl profile --engine``; the other profilers leave it 0). ``per_context_pair_s``
  (optional): each new token's attention over each token already in KV (a cached prefix,
  or an earlier chunk of the same prompt), where the fresh-prompt quadratic implies ``2q``
  (absent: ``2q``, so ``b·n + q·((ctx + n)² − ctx²)`` as before); a chunk of ``n`` tokens
  on ``ctx`` costs ``b·n + q·n² + per_context_pair_s·ctx·n``;
- ``reload``: bringing KV back from a host (CPU) tier: ``latency_s +
  c · kv_bytes_per_token / bandwidth_bytes_per_s``;
- ``decode``: one decode step of a batch: ``step_s + per_seq_s·seqs +
  per_kv_token_s·kv_tokens`` (used by the simulator);
- ``wake`` (optional, written only when measured): what an engine's first call after it
  has been idle costs beyond the same call on a busy engine, as ``[idle seconds, extra
  seconds]`` points (:meth:`Profile.wake_s`, :mod:`profiles.wake`): the steps that follow
  an idle spell run slower for a while (caches and clocks settling); the simulator charges
  it to the first step after each idle spell. Absent: nothing (every step priced as on a
  warm engine);
- ``new_shape`` (optional, written only when measured): what a step costs on top the first
  time the engine runs a step of that many scheduled tokens, as ``[tokens, extra seconds]``
  points (:meth:`Profile.new_shape_s`, :mod:`profiles.new_shape`): the engine builds its
  kernels for each new step size once. Absent: nothing;
- ``source``: how it was obtained (``measured``, ``roofline``, ``published``) and
  from what, so that every figure can be traced.

One definition prices a rebuild (:meth:`Profile.rebuild_prefill_s`): ``tokens``
prefilled from nothing on an idle engine in steps of at most ``chunk`` tokens;
each step pays the fixed cost once (:attr:`Profile.prefill_fixed_s`) and its
tokens :meth:`Prefill.tokens_s` (``b·n + q·((ctx + n)² − ctx²)``, or with
``per_context_pair_s`` ``b·n + q·n² + per_context_pair_s·ctx·n``). The policy's benefit
B, the baselines and the simulator's steps (``profiles/cost.py``) all price from it.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

from profiles.new_shape import new_shape_s
from profiles.wake import wake_s

SCHEMA = "ttlctl.profile/1"


class PrefillDoc(TypedDict):
    a: float
    b: float
    q: float
    #: [context tokens, seconds] pairs the quadratic was fitted on
    points: list[list[float]]
    rmse_s: float | None
    #: true: a + b·c + q·c² is a whole prefill-only step; false: on top of decode.step_s
    includes_step: bool
    #: seconds per prompt token found in the prefix cache at admission (absent: 0,
    #: written only when measured)
    per_cached_token_s: NotRequired[float]
    #: seconds per (new token, token already in KV) pair (absent: 2q; written when measured)
    per_context_pair_s: NotRequired[float]


class ReloadDoc(TypedDict):
    bandwidth_bytes_per_s: float
    latency_s: float


class DecodeDoc(TypedDict):
    step_s: float
    per_seq_s: float
    per_kv_token_s: float


class ProfileDoc(TypedDict):
    """A profile as it is written (``profile.json``, a bundle's ``profile``):
    :meth:`Profile.to_json`; :func:`profiles.profile_read.from_json` reads it back, checked."""

    schema: str
    name: str
    device: str
    model: str
    kv_bytes_per_token: int
    max_context: int
    prefill: PrefillDoc
    reload: ReloadDoc
    decode: DecodeDoc
    #: [idle seconds, extra seconds] of a call after an idle spell (absent: none; written
    #: only when measured)
    wake: NotRequired[list[list[float]]]
    #: [tokens, extra seconds] of a step of a size the engine had not run (absent: none)
    new_shape: NotRequired[list[list[float]]]
    #: how it was obtained: ``kind`` (measured, roofline, published …) and what the
    #: profiler recorded (free-form: each profiler writes its own keys)
    source: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Prefill:
    a: float
    b: float
    q: float
    #: (context tokens, seconds) the quadratic was fitted on
    points: tuple[tuple[int, float], ...] = ()
    rmse_s: float | None = None
    #: True: ``seconds(c)`` is a whole prefill-only step (``a`` holds the step's fixed
    #: cost); False: what ``c`` tokens add to a step on top of ``decode.step_s``
    includes_step: bool = True
    #: what each prompt token found in the prefix cache costs when its request is
    #: admitted (the server reading it, the engine hashing its block): paid by the step
    #: that computes the request's first chunk, on top of that chunk's tokens
    per_cached_token_s: float = 0.0
    #: what each new token's attention over each token already in KV (found cached, or
    #: computed by an earlier chunk) costs; None: ``2q``, the fresh-prompt quadratic's
    per_context_pair_s: float | None = None

    def seconds(self, tokens: float) -> float:
        """The fitted quadratic at ``tokens`` (what was measured; see ``includes_step``)."""
        return max(0.0, self.a + self.b * tokens + self.q * tokens * tokens)

    def tokens_s(self, context: float, chunk: float) -> float:
        """What ``chunk`` tokens on top of ``context`` add to a step: ``b·chunk`` plus
        their attention over each other (``q·chunk²``) and over what is already in KV
        (``per_context_pair_s·context·chunk``; without it, the quadratic's increment
        ``q·((context + chunk)² − context²)``)."""
        if self.per_context_pair_s is None:
            end = context + chunk
            return self.b * chunk + self.q * (end * end - context * context)
        return self.b * chunk + (self.q * chunk + self.per_context_pair_s * context) * chunk


@dataclass(frozen=True, slots=True)
class Reload:
    bandwidth_bytes_per_s: float
    latency_s: float


@dataclass(frozen=True, slots=True)
class Decode:
    step_s: float
    per_seq_s: float
    per_kv_token_s: float


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    device: str
    model: str
    kv_bytes_per_token: int
    max_context: int
    prefill: Prefill
    reload: Reload
    decode: Decode
    source: dict[str, Any] = field(default_factory=dict)
    #: (idle seconds, extra seconds) a call after an idle spell of that length was measured
    #: to cost beyond the same call on a busy engine, idle ascending (empty: none)
    wake: tuple[tuple[float, float], ...] = ()
    #: (tokens, extra seconds) a step of that many tokens was measured to cost on top the
    #: first time the engine ran that size, tokens ascending (empty: none)
    new_shape: tuple[tuple[float, float], ...] = ()

    def wake_s(self, idle_s: float) -> float:
        """What the first step after ``idle_s`` seconds with nothing to run costs beyond its
        price on a busy engine: linear between the measured points and from (0, 0), the last
        point's beyond it (0 without points)."""
        return wake_s(self.wake, idle_s)

    def new_shape_s(self, tokens: int) -> float:
        """What a step of ``tokens`` scheduled tokens costs on top the first time the engine
        runs that size (:func:`profiles.new_shape.new_shape_s`; 0 without points)."""
        return new_shape_s(self.new_shape, tokens)

    def prefill_s(self, tokens: float) -> float:
        """The fitted quadratic at ``tokens``; a rebuild's price is :meth:`rebuild_prefill_s`."""
        return self.prefill.seconds(tokens)

    @property
    def prefill_fixed_s(self) -> float:
        """The fixed cost of a step that prefills: ``a``, plus ``decode.step_s`` when the
        prefill fit does not include the step (``includes_step`` false)."""
        p = self.prefill
        return p.a if p.includes_step else p.a + self.decode.step_s

    @property
    def chunk_tokens(self) -> int | None:
        """The step budget the profile was measured with (``source.flags``), if recorded."""
        flags = self.source.get("flags")
        budget = flags.get("max_num_batched_tokens") if isinstance(flags, dict) else None
        return budget if isinstance(budget, int) and budget > 0 else None

    def rebuild_prefill_s(self, tokens: float, chunk: int | None = None) -> float:
        """THE price of a rebuild: prefill ``tokens`` from nothing on an idle engine, in
        steps of at most ``chunk`` tokens (None: one step).

        Each step pays :attr:`prefill_fixed_s` once and its tokens
        :meth:`Prefill.tokens_s`; the increments telescope, so the sum is
        ``steps·fixed + b·tokens + q·tokens²``: chunking adds only the further
        steps' fixed cost (the attention over earlier chunks is in the increments).
        With ``per_context_pair_s`` (r) measured, the chunks' own squares cost ``q`` and
        each pair of tokens in different chunks ``r``: ``steps·fixed + b·tokens +
        q·Σnᵢ² + r·(tokens² − Σnᵢ²)/2`` (one step: the quadratic itself).
        The simulator's steps (``profiles/cost.py``) charge exactly this.
        """
        if tokens <= 0:
            return 0.0
        steps = 1 if chunk is None or chunk <= 0 else -(-math.ceil(tokens) // chunk)
        p = self.prefill
        price = steps * self.prefill_fixed_s + p.b * tokens
        if p.per_context_pair_s is None:
            return price + p.q * tokens * tokens
        # the chunks' own squares, and every pair of tokens in different chunks once
        full = steps - 1
        last = tokens - full * chunk if full and chunk else tokens
        own = full * chunk * chunk + last * last if full and chunk else tokens * tokens
        return price + p.q * own + p.per_context_pair_s * (tokens * tokens - own) / 2

    def reload_s(self, tokens: float) -> float:
        r = self.reload
        return r.latency_s + tokens * self.kv_bytes_per_token / r.bandwidth_bytes_per_s

    def rebuild_s(self, tokens: float, offload: bool, chunk: int | None = None) -> float:
        """PrefillReload of docs/method.md: reload when a host tier holds the KV, else the
        prefill's price (:meth:`rebuild_prefill_s`, in steps of ``chunk`` tokens; None:
        the budget the profile was measured with, or one step when it records none)."""
        if offload:
            return self.reload_s(tokens)
        return self.rebuild_prefill_s(tokens, self.chunk_tokens if chunk is None else chunk)

    def to_json(self) -> ProfileDoc:
        pre, rel, dec = self.prefill, self.reload, self.decode
        doc: ProfileDoc = {
            "schema": SCHEMA,
            "name": self.name,
            "device": self.device,
            "model": self.model,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "max_context": self.max_context,
            "prefill": {
                "a": pre.a,
                "b": pre.b,
                "q": pre.q,
                "points": [list(p) for p in pre.points],
                "rmse_s": pre.rmse_s,
                "includes_step": pre.includes_step,
            },
            "reload": {
                "bandwidth_bytes_per_s": rel.bandwidth_bytes_per_s,
                "latency_s": rel.latency_s,
            },
            "decode": {
                "step_s": dec.step_s,
                "per_seq_s": dec.per_seq_s,
                "per_kv_token_s": dec.per_kv_token_s,
            },
            "source": copy.deepcopy(self.source),
        }
        if pre.per_cached_token_s:  # written when measured: other profiles read as before
            doc["prefill"]["per_cached_token_s"] = pre.per_cached_token_s
        if pre.per_context_pair_s is not None:
            doc["prefill"]["per_context_pair_s"] = pre.per_context_pair_s
        if self.wake:
            doc["wake"] = [[x, y] for x, y in self.wake]
        if self.new_shape:
            doc["new_shape"] = [[x, y] for x, y in self.new_shape]
        return doc
