"""The loads a command is asked for, checked: one load (replay, validate) or a list (tune,
refit). Each refusal is one :class:`~ttlctl.errors.ConfigError` naming the option."""

from __future__ import annotations

from collections.abc import Sequence

from replay.policy_runs import Load
from ttlctl.errors import ConfigError

#: the rarest starts taken (programs per second): a mean gap of 11.6 days. Rarer starts
#: share no engine, and far rarer ones (``--jps 1e-300``: arrivals near 1e300 s) lose the
#: calls' seconds to float precision (every JCT 0.00)
MIN_JPS = 1e-6
#: the most seeds a command replays each load with (tune's --seeds and --holdout-seeds,
#: refit's --seeds): far past any study, short of a list too long to build
SEEDS_MAX = 10_000


def check_seeds(flag: str, seeds: int) -> None:
    """A count of seeds: at least one, at most :data:`SEEDS_MAX`."""
    if seeds < 1:
        raise ConfigError(f"{flag} must be >= 1, not {seeds}")
    if seeds > SEEDS_MAX:
        raise ConfigError(f"{flag} must be at most {SEEDS_MAX:,}, not {seeds:,}")


def check_jps(jps: float) -> None:
    """One ``--jps`` value: positive and no rarer than :data:`MIN_JPS`."""
    if jps <= 0:
        raise ConfigError("--jps must be positive")
    if jps < MIN_JPS:
        raise ConfigError(
            f"--jps must be at least {MIN_JPS:g} programs per second (a mean gap of "
            f"{1 / MIN_JPS / 86_400:.1f} days), not {jps:g}: rarer starts share no engine, and "
            "far rarer ones lose the calls' seconds to float precision"
        )


def one_load(jps: float | None, concurrency: int | None, seed: int = 0) -> Load:
    """Poisson starts at ``jps``, ``concurrency`` programs kept live, or the trace's starts."""
    if jps is not None and concurrency is not None:
        raise ConfigError("give --jps or --concurrency, not both")
    if jps is not None:
        check_jps(jps)
    if concurrency is not None and concurrency <= 0:
        raise ConfigError("--concurrency must be positive")
    if seed < 0:  # numpy's SeedSequence takes no negative seed
        raise ConfigError(f"--seed must be >= 0, not {seed}")
    return Load(jps=jps, concurrency=concurrency, seed=seed)


def load_list(jps: Sequence[float], concurrency: Sequence[int]) -> tuple[Load, ...]:
    """One load per ``jps`` then one per ``concurrency`` (empty: the command's default)."""
    if any(j <= 0 for j in jps) or any(c <= 0 for c in concurrency):
        raise ConfigError("--jps and --concurrency must be positive")
    for j in jps:
        check_jps(j)
    return tuple([Load(jps=j) for j in jps] + [Load(concurrency=c) for c in concurrency])
