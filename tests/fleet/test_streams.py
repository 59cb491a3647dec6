"""What a replica holds of a program's stream (replay/fleet/streams.py) caps what a call
reuses there (replay/fleet/arrival.py): a call that returns to the replica of its
program's previous call reuses what it repeats of that call; one on a replica that held an
older turn reuses only what it repeats of that turn's stream; one on a replica that held
none of the program reuses nothing."""

from __future__ import annotations

from profiles.cost import ProfileCostModel
from profiles.shipped import resolve
from replay.fleet.routers import RouterSettings
from replay.fleet.routers.base import RoutedCall
from replay.fleet.run import FleetSpec, simulate_fleet_one
from replay.fleet.streams import Streams
from replay.policies import PolicySpec
from replay.policy_runs import Load
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig
from replay.workload import AgentProgram, Call, Workload

BS = 16
#: one program whose second call keeps only 160 tokens of the first's 1,100-token stream
#: (its history rewritten), and whose third repeats all of the second's 1,250
WORK = Workload(
    (
        AgentProgram(
            "p",
            0.0,
            (
                Call(1000, 100, 0, None, 1.0),
                Call(1200, 50, 160, None, 1.0),
                Call(1400, 20, 1250, None, 0.0),
            ),
        ),
    )
)


def _call(streams: Streams, turn: int) -> RoutedCall:
    book = streams.prompts["p"]
    return RoutedCall("p", turn, book.prompts[turn], book.sizes[turn])


def test_a_replica_reuses_what_it_held_of_the_programs_stream() -> None:
    streams = Streams(WORK, BS)
    streams.held("p", 0, 0)  # turn 0 served on replica 0
    assert streams.reusable(0, _call(streams, 1)) == 160  # back there: what it repeats
    assert streams.reusable(1, _call(streams, 1)) == 0  # replica 1 held none of it
    streams.held("p", 1, 1)  # turn 1 served on replica 1
    assert streams.reusable(1, _call(streams, 2)) == 1250  # all of turn 1's stream
    # replica 0 held turn 0's stream: turn 2 repeats only the 160 tokens turn 1 kept of it
    assert streams.reusable(0, _call(streams, 2)) == 160
    assert streams.reusable(0, _call(streams, 0)) == 0  # a first call reuses nothing


def _hits(replicas: int) -> list[tuple[int, int, int]]:
    """(turn, replica, prompt tokens hit) of each call, round-robin on ``replicas``."""
    outcome, _, _ = simulate_fleet_one(
        WORK,
        PolicySpec("vllm"),
        ProfileCostModel(resolve("llama-3.1-8b-h100")[0]),
        ReplayConfig(engine=SimSchedulerConfig(kv_tokens=64_000, block_size=BS)),
        Load(),
        FleetSpec(replicas, RouterSettings("round-robin")),
    )
    return sorted(
        (c.turn, r, c.hit_tokens) for c, r in zip(outcome.calls, outcome.call_replicas, strict=True)
    )


def test_a_call_hits_only_what_its_replica_held_of_its_stream() -> None:
    """Round-robin on two replicas sends turns 0 and 2 to replica 0 and turn 1 to replica
    1: turn 1 hits nothing there; turn 2 finds turn 0's blocks still cached on replica 0
    but hits only the 160 tokens (10 blocks) its prompt repeats of them. On one replica
    every follow-up hits the full blocks it repeats of its previous call."""
    assert _hits(2) == [(0, 0, 0), (1, 1, 0), (2, 0, 160)]
    assert _hits(1) == [(0, 0, 0), (1, 0, 160), (2, 0, 1248)]
