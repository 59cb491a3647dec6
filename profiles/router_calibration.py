"""A profile as vLLM's router (``vllm-router``) calibrates its Program scheduling.

``vllm-router --enable-program-scheduling`` (0.1.17) prices a cache miss and a decode batch
with two offline models, read from ``--program-scheduling-config-json``; without them it
runs on reference coefficients measured elsewhere and warns so at start
(``program_scheduling_reference_calibration``). Both models are a ttlctl profile's fits
under other names and units. The router's formulas, as its source states them
(vllm-project/router, ``src/program_scheduling/policy.rs`` ``ProgressTtlPolicyMath`` and
``src/config/validation.rs`` ``validate_program_scheduling``; the 0.1.17 wheel):

- cold prefill of ``n`` uncached tokens, ``x = n / 1000``:
  ``intercept_seconds + linear_seconds_per_1k_tokens·x
  + quadratic_seconds_per_1k_tokens_squared·x²`` — the profile's price of a rebuild in
  one step, :meth:`~profiles.schema.Profile.rebuild_prefill_s`
  ``prefill_fixed_s + b·n + q·n²``, so the intercept is the step's fixed cost
  (``a``, plus ``decode.step_s`` when the prefill fit leaves the step out), the linear
  term ``1000·b`` (s per 1k tokens) and the quadratic ``10⁶·q`` (s per (1k tokens)²);
  each must be finite and ≥ 0. A prompt longer than the engine's step budget is
  prefilled in several steps, each paying the fixed cost again; the router's quadratic
  has no place for that, so it prices such a prompt (steps − 1)·intercept lower than
  the profile does (and, with ``prefill.per_context_pair_s`` measured, the pairs across
  its chunks at ``2q`` where the profile prices them at that term; nor has it a place
  for ``prefill.per_cached_token_s``: it prices the uncached tokens alone);
- a miss's impact: ``prefill·(2 − decode_throughput_alpha)``, alpha being the share of
  decode throughput kept while a prefill is mixed into the batch (in [0, 1]). A ttlctl
  profile prices a mixed step as the sum of its decodes and its prefill chunks
  (:mod:`profiles.cost`), so a prefill delays every running decode by its whole
  duration: alpha = 0 in the model ttlctl replays with. ``decode_throughput_alpha``
  overrides it (a device that overlaps them better);
- decode throughput of a batch of ``B`` requests holding ``C`` context tokens in all:
  ``B / (fixed_step_seconds + batch_step_seconds_per_request·B
  + context_step_seconds_per_token·C)`` — the profile's decode step
  ``step_s + per_seq_s·seqs + per_kv_token_s·kv_tokens`` term for term, in the same
  units (fixed step > 0, the others ≥ 0).

A profile that cannot be written this way is refused with one line
(:class:`RouterCalibrationError`): no decode fit (a step of 0 s), or a negative or
non-finite coefficient, which the router rejects at start. Pure and standard-library only.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from profiles.profile_read import ProfileError, coefficient_problem
from profiles.schema import Profile

#: the router's ``prefill_cost_model.decode_throughput_alpha`` under ttlctl's additive step
ADDITIVE_STEP_ALPHA = 0.0
#: tokens per unit of the router's prefill model
TOKENS_PER_UNIT = 1000.0


class RouterCalibrationError(ProfileError):
    """A profile the router's Program scheduling cannot take: one line naming what is missing."""


@dataclass(frozen=True, slots=True)
class PrefillCostModel:
    """The router's ``prefill_cost_model`` (seconds; tokens in units of 1,000)."""

    intercept_seconds: float
    linear_seconds_per_1k_tokens: float
    quadratic_seconds_per_1k_tokens_squared: float
    decode_throughput_alpha: float

    def prefill_seconds(self, uncached_tokens: int) -> float:
        """The router's cold-prefill estimate (0 for no tokens, as it has)."""
        if uncached_tokens <= 0:
            return 0.0
        x = uncached_tokens / TOKENS_PER_UNIT
        return (
            self.intercept_seconds
            + self.linear_seconds_per_1k_tokens * x
            + self.quadratic_seconds_per_1k_tokens_squared * x * x
        )

    def cache_miss_impact_seconds(self, uncached_tokens: int) -> float:
        """The router's price of a miss: the prefill, plus the decode throughput it costs."""
        return self.prefill_seconds(uncached_tokens) * (2.0 - self.decode_throughput_alpha)


@dataclass(frozen=True, slots=True)
class DecodeThroughputModel:
    """The router's ``decode_throughput_model`` (seconds per decode step)."""

    fixed_step_seconds: float
    batch_step_seconds_per_request: float
    context_step_seconds_per_token: float

    def step_seconds(self, batch_size: int, total_context_tokens: int) -> float:
        return (
            self.fixed_step_seconds
            + self.batch_step_seconds_per_request * batch_size
            + self.context_step_seconds_per_token * total_context_tokens
        )

    def decode_throughput(self, batch_size: int, total_context_tokens: int) -> float:
        """The router's aggregate output tokens per second of one decode batch."""
        return batch_size / self.step_seconds(batch_size, total_context_tokens)


@dataclass(frozen=True, slots=True)
class Row:
    """One coefficient: the router's field, its value and unit, and where it came from."""

    field: str
    value: float
    unit: str
    source: str


@dataclass(frozen=True, slots=True)
class RouterCalibration:
    """The calibration part of the router's Program-scheduling config, from one profile."""

    profile: str
    prefill: PrefillCostModel
    decode: DecodeThroughputModel
    alpha_measured: bool

    def to_json(self) -> dict[str, Any]:
        """The ``prefill_cost_model`` and ``decode_throughput_model`` objects, all seven
        fields given (so the router uses none of its reference values)."""
        p, d = self.prefill, self.decode
        quadratic = p.quadratic_seconds_per_1k_tokens_squared
        return {
            "prefill_cost_model": {
                "intercept_seconds": p.intercept_seconds,
                "linear_seconds_per_1k_tokens": p.linear_seconds_per_1k_tokens,
                "quadratic_seconds_per_1k_tokens_squared": quadratic,
                "decode_throughput_alpha": p.decode_throughput_alpha,
            },
            "decode_throughput_model": {
                "fixed_step_seconds": d.fixed_step_seconds,
                "batch_step_seconds_per_request": d.batch_step_seconds_per_request,
                "context_step_seconds_per_token": d.context_step_seconds_per_token,
            },
        }

    def flag_value(self, extra: dict[str, Any] | None = None) -> str:
        """``--program-scheduling-config-json``'s value: compact JSON, ``extra`` (other
        Program-scheduling fields, e.g. a tuned bundle's) merged in first."""
        doc = {**(extra or {}), **self.to_json()}
        return json.dumps(doc, separators=(",", ":"))

    def rows(self) -> list[Row]:
        """Each coefficient with its unit and the profile term it converts."""
        p, d = self.prefill, self.decode
        alpha_from = (
            "given (--decode-throughput-alpha)"
            if self.alpha_measured
            else "ttlctl's additive step: a prefill delays every decode by its whole time"
        )
        return [
            Row(
                "prefill_cost_model.intercept_seconds",
                p.intercept_seconds,
                "s",
                "a prefill step's fixed cost: prefill a (+ decode step_s if the fit leaves it out)",
            ),
            Row(
                "prefill_cost_model.linear_seconds_per_1k_tokens",
                p.linear_seconds_per_1k_tokens,
                "s per 1k tokens",
                "prefill b (s/token) × 1e3",
            ),
            Row(
                "prefill_cost_model.quadratic_seconds_per_1k_tokens_squared",
                p.quadratic_seconds_per_1k_tokens_squared,
                "s per (1k tokens)²",
                "prefill q (s/token²) × 1e6",
            ),
            Row(
                "prefill_cost_model.decode_throughput_alpha",
                p.decode_throughput_alpha,
                "share of decode throughput kept during a prefill",
                alpha_from,
            ),
            Row(
                "decode_throughput_model.fixed_step_seconds",
                d.fixed_step_seconds,
                "s per decode step",
                "decode step_s",
            ),
            Row(
                "decode_throughput_model.batch_step_seconds_per_request",
                d.batch_step_seconds_per_request,
                "s per step per batched request",
                "decode per_seq_s",
            ),
            Row(
                "decode_throughput_model.context_step_seconds_per_token",
                d.context_step_seconds_per_token,
                "s per step per context token of the batch",
                "decode per_kv_token_s",
            ),
        ]


def calibrate(
    profile: Profile,
    *,
    decode_throughput_alpha: float | None = None,
    source: str | Path | None = None,
) -> RouterCalibration:
    """The router's Program-scheduling calibration from ``profile``.

    Raises :class:`RouterCalibrationError` for a profile without a decode fit, with a
    coefficient the router refuses (negative or not finite), or an alpha outside [0, 1];
    the message names ``source`` (the profile's file) when given, else the profile's name.
    """
    name = profile.name
    where = str(source) if source is not None else f"profile {name}"
    problem = coefficient_problem(profile)  # a profile's own rule, as loading applies it
    dec = profile.decode
    if problem is None and dec.step_s <= 0:
        problem = f"decode.step_s is {dec.step_s!r}; vllm-router's Program scheduling needs it > 0"
    if problem is not None:
        raise RouterCalibrationError(f"{where}: {problem}")
    pre = profile.prefill
    alpha = ADDITIVE_STEP_ALPHA if decode_throughput_alpha is None else decode_throughput_alpha
    if not (math.isfinite(alpha) and 0.0 <= alpha <= 1.0):
        raise RouterCalibrationError(
            f"--decode-throughput-alpha is {alpha!r}; the router takes a share in [0, 1]"
        )
    return RouterCalibration(
        profile=name,
        prefill=PrefillCostModel(
            intercept_seconds=profile.prefill_fixed_s,
            linear_seconds_per_1k_tokens=pre.b * TOKENS_PER_UNIT,
            quadratic_seconds_per_1k_tokens_squared=pre.q * TOKENS_PER_UNIT**2,
            decode_throughput_alpha=alpha,
        ),
        decode=DecodeThroughputModel(
            fixed_step_seconds=dec.step_s,
            batch_step_seconds_per_request=dec.per_seq_s,
            context_step_seconds_per_token=dec.per_kv_token_s,
        ),
        alpha_measured=decode_throughput_alpha is not None,
    )
