"""The profile ``validate --repeats K`` measures when none is given, fleet or not.

A fleet (``--replicas N``): one measurement in each repeat (:func:`measure_replica`), on
the last fleet of the repeat, on its first replica, after that fleet's live run (a
measurement warms the fleet it runs on: taken before a live run, it would favour that
run's router in every repeat; taken after, every fleet's live run starts alike); where
the replicas have CPUs or GPUs of their own, the other replicas serve a steady load
meanwhile (:func:`~replay.validation.neighbours.kept_busy`), as they will compute beside
it live. One server per policy (:mod:`replay.validation.crosscheck`): one measurement
after each live run of the first policy, on its server (:func:`measure_policy_server`).
A fleet's runs are priced each by its own repeat's measurement
(:mod:`replay.validation.fleet_rows`: the machine's speed drifts within a window, and a
repeat's measurement is the one nearest its runs in time), and beside it, as the single-server
path prices every run, by ONE profile pooled over the K measurements (:func:`pooled`:
:func:`profiles.engine_fit.fit_samples`, every timing of every measurement put together
point by point, the median taken, then the one fit a single measurement uses). The raw
timings are pooled rather than the K fitted profiles: a fit's terms trade off against
each other (one fit puts into its intercept what another puts into its per-token term),
so a median of coefficients need not be a profile any timing supports. A profile
measured once is a ±10% input on a shared CPU machine (two measured the same way hours
apart differed term by term by 12–76%); pooled over the window the live runs span, it
sees the machine they see on average.

Each measurement takes :data:`MEASURE_REPEATS` timings at each point: about 15 s for the
55M test model on one CPU, twice that at 4; pooled over K repeats, more timings a
measurement buy less than one more live run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from profiles.engine_fit import fit_samples
from profiles.engine_timings import EngineSamples
from profiles.measure_server import check_measurable, measure_samples
from profiles.schema import Profile
from replay.validation.error import ValidateError
from replay.validation.neighbours import kept_busy
from ttlctl.server import cpus, gpus

#: timings a measurement takes at each prefill point and of each decode batch shape
MEASURE_REPEATS = 2
#: tokens each decode measurement generates
OUTPUT_TOKENS = 16


@dataclass(frozen=True, slots=True)
class Measured:
    """One measurement of a replica: in which repeat, where and beside what load, and
    every timing it took."""

    repeat: int
    source: str
    #: requests the other replicas served meanwhile (0: none kept busy)
    served: int
    samples: EngineSamples
    #: the measurement's own fit (made at once: one that cannot be fitted is refused
    #: before the next live run, naming its replica)
    fitted: Profile

    def to_json(self) -> dict[str, Any]:
        """The measurement as the document keeps it: with its own fit and its timings."""
        return {
            "repeat": self.repeat,
            "source": self.source,
            "created": self.samples.created,
            "others_served": self.served,
            "doc": self.fitted.to_json(),
            "samples": self.samples.to_json(),
        }


def measure_replica(
    urls: Sequence[str],
    *,
    model: str,
    policy: str,
    repeat: int,
    cpu_sets: Sequence[Sequence[int]] | None,
    gpu_sets: Sequence[Sequence[str]] | None = None,
    model_config: dict[str, Any] | None,
    vocab_size: int | None,
) -> Measured:
    """The first of a fleet's replica ``urls`` measured (the others kept busy when the
    replicas have devices of their own: ``cpu_sets``, ``gpu_sets``); :class:`ValidateError`
    if it cannot be."""
    first, *rest = urls
    placed = cpu_sets is not None or gpu_sets is not None
    others = list(rest) if placed else []
    with kept_busy(others, model, vocab_size=vocab_size) as served:
        samples, fitted = _measure(first, f"a replica at {first}", model_config, MEASURE_REPEATS)
    where = f"measured from {policy}'s replica at {first}"
    if cpu_sets is not None:
        where += f", pinned to CPUs {cpus.cpu_list(cpu_sets[0])}"
    if gpu_sets is not None:
        where += f", on GPUs {gpus.gpu_list(gpu_sets[0])}"
    if placed:
        where += f", while {len(others)} other replica(s) served {sum(served)} requests"
    return Measured(repeat, where, sum(served), samples, fitted)


def measure_policy_server(
    url: str,
    *,
    policy: str,
    repeat: int,
    model_config: dict[str, Any] | None,
    repeats: int = MEASURE_REPEATS,
) -> Measured:
    """``policy``'s server at ``url`` measured, ``repeats`` timings at each point;
    :class:`ValidateError` if it cannot be."""
    samples, fitted = _measure(url, f"{policy}'s server", model_config, repeats)
    return Measured(repeat, f"measured from {policy} at {url}", 0, samples, fitted)


def measurable(url: str, what: str, model_config: dict[str, Any] | None) -> None:
    """Refuse, before any live run, a server whose profile could not be measured after
    it (no KV bytes per token, no prompt length it takes): :class:`ValidateError` naming
    ``what``, so that no run's minutes are spent for a document never written."""
    try:
        check_measurable(url, model_config, output_tokens=OUTPUT_TOKENS)
    except ValueError as exc:
        raise ValidateError(f"profiling {what}: {exc}") from None


def _measure(
    url: str, what: str, model_config: dict[str, Any] | None, repeats: int
) -> tuple[EngineSamples, Profile]:
    """Every timing of the server at ``url``, and their fit, made at once (one that cannot
    be fitted is refused before the next live run, naming ``what``)."""
    try:
        samples = measure_samples(
            url,
            model_config=model_config,
            repeats=repeats,
            output_tokens=OUTPUT_TOKENS,
            timeout_s=120.0,
        )
        return samples, fit_samples([samples])
    except ValueError as exc:
        raise ValidateError(f"profiling {what}: {exc}") from None


def by_repeat(measured: Sequence[Measured], repeats: int) -> dict[int, Profile]:
    """Each repeat's own fit, keyed by the repeat counted from 0 as the runs are
    ({} when nothing was measured: a profile was given). A measurement in each of the
    ``repeats`` is expected (:class:`ValidateError` otherwise: a run would be priced by
    another repeat's machine)."""
    if not measured:
        return {}
    own = {m.repeat - 1: m.fitted for m in measured}
    if sorted(own) != list(range(repeats)) or len(own) != len(measured):
        numbers = ", ".join(str(m.repeat) for m in measured)
        raise ValidateError(
            f"one measurement in each of {repeats} repeats was expected, got repeats {numbers}"
        )
    return own


#: where a fleet's measurements are taken, in :func:`pooled`'s words
ON_FLEETS = "on its last fleet's first replica"


def pooled(measured: Sequence[Measured], where: str = ON_FLEETS) -> tuple[Profile, str]:
    """The profile pooled over ``measured`` (each taken ``where``, in words) and what it
    is, in words."""
    profile = fit_samples([m.samples for m in measured])
    if len(measured) == 1:
        return profile, measured[0].source
    busy = ""
    if any(m.served for m in measured):
        served = ", ".join(str(m.served) for m in measured)
        busy = f" (the other replicas served {served} requests meanwhile)"
    source = (
        f"pooled over {len(measured)} measurements, one in each repeat {where} after "
        f"its live run{busy}: every timing put together, then fitted once; first "
        f"{measured[0].source}"
    )
    return profile, source
