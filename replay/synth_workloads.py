"""The workloads :func:`replay.synth.synth` draws: the Continuum paper's per-program figures
(turns, tool time per call, tokens per program) and the choices that reproduce them
(:class:`Spec`, :data:`WORKLOADS`: each one's tools with their weights, durations and result
sizes), the last tool's duration solved so that the mixture has the paper's mean and sd
(:func:`solved_tools`), and the discretised normal of the turns with the paper's mean and sd
(:func:`turns_distribution`). The tables and the reasons are in :mod:`replay.synth`'s
docstring."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np
from scipy.optimize import root

from ttlctl.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    weight: float
    #: mean duration (s); None: solved so the mixture matches the paper
    mean_s: float | None
    cv: float | None
    #: relative size of its result in the context
    result_weight: float

    def moments(self) -> tuple[float, float]:
        """(E[X], E[X²]) of its duration."""
        if self.mean_s is None or self.cv is None:
            raise ValueError(f"tool {self.name}: duration not solved yet")
        return self.mean_s, self.mean_s**2 * (1 + self.cv**2)


@dataclass(frozen=True, slots=True)
class Spec:
    """One workload: the paper's figures and the choices that reproduce them."""

    name: str
    prefix: str
    turns_mean: float
    turns_sd: float
    tool_mean_s: float
    tool_sd_s: float
    tokens_mean: float
    tokens_sd: float
    first_prompt_median: float
    output_median: float
    tools: tuple[Tool, ...]


WORKLOADS: dict[str, Spec] = {
    "swe-bench": Spec(
        name="swe-bench",
        prefix="swe",
        turns_mean=10.9,
        turns_sd=2.1,
        tool_mean_s=0.925,
        tool_sd_s=3.550,
        tokens_mean=70_000,
        tokens_sd=20_000,
        first_prompt_median=3_000,
        output_median=250,
        tools=(
            Tool("bash", 0.35, 0.20, 1.0, 1.0),
            Tool("view", 0.20, 0.08, 0.8, 2.5),
            Tool("edit", 0.18, 0.10, 0.8, 0.6),
            Tool("search", 0.12, 0.50, 1.2, 1.2),
            Tool("python", 0.10, 2.50, 1.5, 0.8),
            Tool("pytest", 0.05, None, None, 1.5),
        ),
    ),
    "bfcl": Spec(
        name="bfcl",
        prefix="bfcl",
        turns_mean=6.3,
        turns_sd=2.3,
        tool_mean_s=1.923,
        tool_sd_s=2.133,
        tokens_mean=93_000,
        tokens_sd=69_000,
        first_prompt_median=4_000,
        output_median=150,
        tools=(
            Tool("file_system", 0.30, 1.20, 0.8, 1.5),
            Tool("message_api", 0.15, 1.50, 0.9, 0.8),
            Tool("ticket_api", 0.10, 2.00, 1.0, 0.8),
            Tool("trading_bot", 0.15, 2.50, 1.0, 1.0),
            Tool("travel_booking", 0.15, 2.20, 1.0, 1.0),
            Tool("vehicle_control", 0.15, None, None, 0.8),
        ),
    ),
}


def spec_of(workload: str) -> Spec:
    """The workload named ``workload``; :class:`~ttlctl.errors.ConfigError` naming
    ``--workload`` for another name."""
    spec = WORKLOADS.get(workload)
    if spec is None:
        raise ConfigError(
            f"--workload: unknown workload {workload!r}; choose from {', '.join(WORKLOADS)}"
        )
    return spec


def solved_tools(spec: Spec) -> tuple[Tool, ...]:
    """The tool set with the last tool's mean and cv solved from the paper's mean and sd.

    Mixture moments: ``mean = Σ wᵢ mᵢ`` and ``E[X²] = Σ wᵢ mᵢ² (1 + cvᵢ²)``.
    """
    fixed, last = spec.tools[:-1], spec.tools[-1]
    total = sum(t.weight for t in spec.tools)
    if not math.isclose(total, 1.0):
        raise ValueError(f"{spec.name}: tool weights sum to {total}, not 1")
    m1 = sum(t.weight * t.moments()[0] for t in fixed)
    m2 = sum(t.weight * t.moments()[1] for t in fixed)
    mean = (spec.tool_mean_s - m1) / last.weight
    second = (spec.tool_sd_s**2 + spec.tool_mean_s**2 - m2) / last.weight
    var = second - mean * mean
    if mean <= 0 or var <= 0:
        raise ValueError(f"{spec.name}: tool table cannot reach the paper's mean and sd")
    return (*fixed, Tool(last.name, last.weight, mean, math.sqrt(var) / mean, last.result_weight))


@cache
def turns_distribution(mean: float, sd: float, low: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """(support, probabilities) of the discretised normal on ``[low, ⌈mean + 8 sd⌉]``
    whose mean and sd are exactly ``mean`` and ``sd``."""
    support = np.arange(low, math.ceil(mean + 8 * sd) + 1)

    def probs(x: np.ndarray) -> np.ndarray:
        mu, log_sigma = x
        z = (support - mu) / math.exp(log_sigma)
        w = np.exp(-0.5 * z * z)
        return np.asarray(w / w.sum())

    def residual(x: np.ndarray) -> list[float]:
        p = probs(x)
        m = float(p @ support)
        s = math.sqrt(float(p @ (support - m) ** 2))
        return [m - mean, s - sd]

    sol = root(residual, [mean, math.log(sd)], tol=1e-12)
    if not sol.success or max(abs(r) for r in residual(sol.x)) > 1e-9:
        raise ValueError(f"no discretised normal on [{low}, …] has mean {mean} and sd {sd}")
    return support, probs(sol.x)
