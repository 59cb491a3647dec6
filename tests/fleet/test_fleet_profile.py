"""The profile ``validate --replicas --repeats K`` prices every run with when it measures
one itself (replay/validation/fleet_profile.py): the K measurements pooled into one, said
so in words, each kept with its own fit; one measurement is that measurement's profile."""

from __future__ import annotations

import threading
import warnings

import pytest

from profiles import server_wake
from profiles.engine_fit import fit_samples
from profiles.models import PRESETS
from replay.validation.fleet_profile import Measured, measure_replica, pooled
from tests.fleet.test_neighbours import _replica
from tests.http_stub import serving
from tests.profiles.engine_samples import samples
from tests.profiles.test_measure_server import SHORT_GAPS, SHORT_PAIRS, _Stub


def _measured(k: int, served: int) -> Measured:
    where = f"measured from vllm's replica at http://127.0.0.1:81{k}1"
    one = samples(k, f"2026-12-02T03:{25 + 3 * k}:00+00:00", url=f"http://127.0.0.1:81{k}1",
                  scale=1 + 0.1 * k)  # fmt: skip
    return Measured(k, where, served, one, fit_samples([one]))


def test_one_measurement_is_its_own_profile() -> None:
    only = _measured(1, 27)
    profile, source = pooled([only])
    assert profile == fit_samples([only.samples]) and source == only.source
    kept = only.to_json()
    assert kept["doc"] == profile.to_json() and kept["others_served"] == 27
    assert kept["repeat"] == 1 and kept["created"] == only.samples.created
    assert kept["samples"]["prefill"][0][0] == 128


def test_k_measurements_pool_into_one_profile_said_so() -> None:
    taken = [_measured(k, 20 + k) for k in (1, 2, 3)]
    profile, source = pooled(taken)
    assert profile == fit_samples([m.samples for m in taken])
    assert profile.source["pooled"]["measurements"] == 3
    assert source.startswith("pooled over 3 measurements, one in each repeat on its last fleet")
    assert "(the other replicas served 21, 22, 23 requests meanwhile)" in source
    assert source.endswith(f"first {taken[0].source}")
    # the same profile whatever order the repeats are handed over in
    assert pooled(taken[::-1])[0] == profile
    # unpinned replicas are not kept busy: no count of their requests
    idle = [_measured(k, 0) for k in (1, 2)]
    assert "served" not in pooled(idle)[1]
    # kept busy, a neighbour may finish no request during a short measurement: still said
    some = [_measured(1, 0), _measured(2, 3)]
    assert "(the other replicas served 0, 3 requests meanwhile)" in pooled(some)[1]


def test_the_other_replicas_are_kept_busy_only_where_each_has_devices_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A replica measured on its CPUs: its neighbour serves a steady load meanwhile, and the
    measurement says how much; unpinned, nobody is kept busy (a stub server is measured,
    its neighbour a stub that answers each completion at once; the wake timed at the
    short gaps of the server measurement's own tests)."""
    monkeypatch.setattr(server_wake, "IDLE_GAPS", SHORT_GAPS)
    monkeypatch.setattr(server_wake, "WAKE_MIN_PAIRS", SHORT_PAIRS)
    engine = type("Engine", (_Stub,), {"seen": set(), "tokens": 1000})
    bodies: list[dict[str, object]] = []
    neighbour = _replica(bodies, threading.Lock())
    # the stub cannot reset its prefix cache: measure_samples warns
    with serving(engine) as url, serving(neighbour) as other, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        pinned = measure_replica(
            [url, other], model="m", policy="vllm", repeat=1, cpu_sets=[[0], [1]],
            model_config=dict(PRESETS["tiny"]), vocab_size=1000,
        )  # fmt: skip
        served = len(bodies)
        unpinned = measure_replica(
            [url, other], model="m", policy="vllm", repeat=2, cpu_sets=None,
            model_config=dict(PRESETS["tiny"]), vocab_size=1000,
        )  # fmt: skip
    assert pinned.served == served > 0
    assert pinned.source.endswith(f"while 1 other replica(s) served {served} requests")
    assert "pinned to CPUs 0" in pinned.source
    assert unpinned.served == 0 and len(bodies) == served
    assert unpinned.source == f"measured from vllm's replica at {url}"
