"""Each router model's choices on small hand-made cases, against the real router's rules
(vllm-router 0.1.17's policies; see each module's docstring for the file it follows)."""

from __future__ import annotations

from collections import Counter
from itertools import count

import numpy as np
import pytest

from replay.fleet.prompts import Runs, common_prefix, program_prompts, tokens, truncated
from replay.fleet.routers import RouterSettings, make_router
from replay.fleet.routers.base import RoutedCall
from replay.fleet.routers.cache_aware import CacheAware, PromptTree
from replay.fleet.routers.consistent_hash import ConsistentHash, HashRing, default_urls, session_key
from replay.fleet.routers.furc import fbi_hash, furc, murmur64a
from replay.fleet.routers.kv_aware import KvAware
from replay.fleet.routers.pin_aware import PinAware
from replay.fleet.routers.power_of_two import PowerOfTwo
from replay.fleet.routers.random_pick import RandomPick
from replay.fleet.routers.round_robin import RoundRobin
from replay.fleet.routers.sticky_least_loaded import StickyLeastLoaded
from replay.fleet.run import FleetSpec
from replay.workload import AgentProgram, Call, SharedPrefix
from tests.fleet.views import View
from ttlctl.errors import ConfigError


def call(program: str, prompt: Runs, turn: int = 0) -> RoutedCall:
    return RoutedCall(program, turn, prompt, tokens(prompt))


def test_runs_share_prefixes_as_content():
    a: Runs = ((1, 100), (2, 50))
    assert common_prefix(a, ((1, 100), (2, 20), (3, 5))) == 120
    assert common_prefix(a, ((1, 60),)) == 60
    assert common_prefix(a, ((4, 100),)) == 0
    assert truncated(a, 130) == ((1, 100), (2, 30))


def test_a_call_that_changes_its_shared_keys_repeats_none_of_the_older_stream():
    """As vLLM's token streams (``replay.vllmsim.tokens``) and the pools have it: past a
    change of shared keys a program's prompt repeats nothing of its stream before it, so a
    replica that held an older turn finds none of it reused (the fleet differential's
    draw: turn 4 on the replica of turn 2 hit 64 tokens on the fast fleet, none on vLLM's)."""
    shared = SharedPrefix((1,), 64)
    calls = (
        Call(72, 1, 0, None, 0.0),
        Call(74, 1, 73, None, 0.0),
        Call(76, 1, 75, None, 0.0),
        Call(78, 1, 77, None, 0.0, shared),  # 4 shared keys at 16
        Call(80, 1, 79, None, 0.0, SharedPrefix((1,), 8)),  # none at 16
        Call(82, 1, 81, None, 0.0, SharedPrefix((1,), 8)),
    )
    book = program_prompts(AgentProgram("p", 0.0, calls), count(), 16)
    assert common_prefix(book.prompts[2], book.stream(1)) == 75
    assert common_prefix(book.prompts[3], book.stream(2)) == 0  # the keys came
    assert common_prefix(book.prompts[4], book.stream(2)) == 0  # and went: a new stream
    assert common_prefix(book.prompts[4], book.stream(3)) == 0
    assert common_prefix(book.prompts[5], book.stream(4)) == 81  # the same keys again


def test_round_robin_cycles():
    r, v = RoundRobin(), View([0, 0, 0])
    assert [r.route(call("p", ((1, 10),)), v, 0.0) for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_power_of_two_takes_the_lighter_of_two_distinct_draws():
    # two workers: the pair is always both, so the lighter always wins (the real tests)
    r = PowerOfTwo(np.random.default_rng(0))
    v = View([10, 0])
    assert {r.route(call("p", ((1, 10),)), v, 0.0) for _ in range(50)} == {1}
    # three workers, the busiest never wins (it is never lighter than the other draw)
    v = View([10, 5, 0])
    picks = [r.route(call("p", ((1, 10),)), v, 0.0) for _ in range(300)]
    assert 0 not in picks and picks.count(2) > picks.count(1)


def test_murmur_and_furc_match_mcrouter():
    # MurmurHash64A of the empty key with seed 0 is 0; one byte goes through the tail
    assert murmur64a(b"", 0) == 0
    assert murmur64a(b"a", 0) != murmur64a(b"b", 0)
    assert 0 <= fbi_hash("header:x-session-id:swe-000003") < 2**64
    assert fbi_hash("x") == fbi_hash("x")


def test_consistent_hash_is_sticky_and_spreads_sessions():
    r = ConsistentHash(4)
    v = View([0, 0, 0, 0])
    owners = {f"swe-{i:06d}": r.route(call(f"swe-{i:06d}", ((i, 10),)), v, 0.0) for i in range(400)}
    # same session, same replica, whatever the load
    v_busy = View([1000, 0, 0, 0])
    for s, owner in list(owners.items())[:20]:
        assert r.route(call(s, ((9, 10),), turn=3), v_busy, 5.0) == owner
    counts = [list(owners.values()).count(i) for i in range(4)]
    assert min(counts) > 50  # 160 virtual nodes per worker spread 400 sessions


def test_cache_aware_follows_the_longest_match_above_the_threshold():
    r = CacheAware()
    v = View([0, 0])
    first = r.route(call("a", ((1, 1000),)), v, 0.0)
    assert first == 0  # empty tree: match 0 → the least loaded (the first)
    # the next prompt repeats it (match 1000/1100 > 0.3): back to worker 0 even if busier
    v = View([5, 0])
    assert r.route(call("a", ((1, 1000), (2, 100)), 1), v, 1.0) == 0
    # a prompt that shares too little (200/1000 ≤ 0.3) goes to the least loaded
    assert r.route(call("b", ((1, 200), (3, 800))), v, 2.0) == 1
    # ... and is learnt there: its continuation goes back to worker 1
    assert r.route(call("b", ((1, 200), (3, 800), (4, 10)), 1), View([0, 9]), 3.0) == 1


@pytest.mark.parametrize("seed", range(8))
def test_cache_aware_tree_skipping_a_known_prefix_learns_what_a_full_insert_does(
    seed: int,
) -> None:
    # each program's prompts grow, get cut back and move between workers; the tree that
    # skips the runs of the program's previous prompt (same worker) must equal the tree
    # that inserts every run, and match alike, also when the match skips the runs of the
    # program's last prompt (runs of no tokens included: an empty output's), whether the
    # first run is shared with other programs or the program's own (held by one worker
    # until the program moves: the match then starts past its last prompt at once)
    # (several seeds: a first run of no tokens, moved to another worker, is a case of its own)
    rng = np.random.default_rng(seed)
    skipping, full = PromptTree(), PromptTree()
    prompts: dict[str, Runs] = {}
    firsts = {f"p{i}": (0, 50) if i % 2 else (10 + i, int(rng.integers(0, 30))) for i in range(6)}
    cid = 100
    for _ in range(600):
        program = f"p{rng.integers(6)}"
        prompt = prompts.get(program, (firsts[program],))
        if rng.random() < 0.2 and tokens(prompt) > 0:
            prompt = truncated(prompt, int(rng.integers(1, tokens(prompt) + 1)))
        cid += 1
        prompt = (*prompt, (cid, int(rng.integers(0, 40))))
        prompts[program] = prompt
        worker = int(rng.integers(3))
        walked = full.longest_match(prompt)
        assert skipping.longest_match(prompt) == walked
        assert skipping.longest_match(prompt, program) == walked
        skipping.insert(prompt, worker, program)
        full.insert(prompt, worker)
    assert skipping._runs == full._runs


def _walked_and_skipped(sent: list[tuple[Runs, int]], query: Runs) -> tuple[object, object]:
    """``query``'s match after program p sent ``sent`` (prompt, worker) in order: by the
    walk over every run, and by the walk that skips p's last prompt."""
    tree = PromptTree()
    for prompt, worker in sent:
        tree.insert(prompt, worker, "p")
    return tree.longest_match(query), tree.longest_match(query, "p")


def test_cache_aware_match_past_a_moved_programs_last_prompt_with_an_empty_first_run():
    # p's first run has no tokens; sent to worker 0, then to worker 1 as p moves: both hold
    # it (a run of no tokens was sent all the same), so the walk and the match that starts
    # past p's last prompt (worker 1's) agree on worker 1's 8 tokens
    first, second = ((10, 0), (101, 5)), ((10, 0), (101, 5), (102, 3))
    walked, skipped = _walked_and_skipped([(first, 0), (second, 1)], (*second, (103, 4)))
    assert walked == (8, 1)
    assert skipped == walked


def test_cache_aware_match_past_a_moved_programs_last_prompt_with_an_empty_run_inside():
    # the same, inside the prompt: run 2 (no tokens) is worker 0's alone, run 3 (no tokens)
    # was sent to worker 1, then to worker 0 with p's last prompt: worker 0 holds all of
    # that prompt, and the walk and the match that skips it agree on its 7 tokens
    p1 = ((1, 5), (2, 0))
    p2, p3 = (*p1, (3, 0)), (*p1, (3, 0), (4, 2))
    walked, skipped = _walked_and_skipped([(p1, 0), (p2, 1), (p3, 0)], (*p3, (5, 1)))
    assert walked == (7, 0)
    assert skipped == walked


def test_cache_aware_balances_only_when_both_thresholds_are_crossed():
    def learnt(**kw: float) -> CacheAware:
        r = CacheAware(**kw)  # type: ignore[arg-type]
        r.route(call("a", ((1, 1000),)), View([0, 0]), 0.0)  # learnt by worker 0
        return r

    follow = call("a", ((1, 1000), (2, 10)), 1)
    # 70 − 5 > 64 and 70 > 5 × 1.5: imbalanced → the least loaded, despite the match
    r = learnt()
    assert r.route(follow, View([70, 5]), 1.0) == 1
    # ... and worker 1 learnt the prompt: it now holds the longest match
    assert r.tree.longest_match(follow.prompt) == (1010, 1)
    # 100 − 40 = 60 ≤ 64: balanced → the match wins
    assert learnt().route(follow, View([100, 40]), 2.0) == 0
    # 300 − 250 ≤ 64 and 300 ≤ 250 × 1.5: balanced
    assert learnt().route(follow, View([300, 200]), 3.0) == 0
    # 300 − 100 > 64 but both must hold: 300 > 100 × 1.5 too → imbalanced
    assert learnt().route(follow, View([300, 100]), 3.0) == 1
    # 400 − 300 > 64 but 400 ≤ 300 × 1.5: balanced
    assert learnt().route(follow, View([400, 300]), 3.0) == 0
    strict = learnt(balance_abs_threshold=0, balance_rel_threshold=1.0)
    assert strict.route(follow, View([2, 1]), 1.0) == 1


def test_kv_aware_costs_prefill_times_batch():
    """vllm-router 0.1.17: cost = (tokens to prefill there + its requests' prefills still
    pending) × (its requests in flight + 1); the first lowest cost wins."""
    r = KvAware(np.random.default_rng(0), block_size=16)
    c = call("a", ((1, 1600),), 1)  # 100 blocks
    # replica 1 holds 80 blocks of it: 320 to prefill against 1,600
    assert r.new_prefill_tokens(c, View([0, 0], cached={1: 1280}), 1) == 320
    assert r.costs(c, View([0, 0], cached={1: 1280}))[0] == [1600.0, 320.0]
    # the whole prompt cached: the block with the last token is still computed
    assert r.new_prefill_tokens(c, View([0, 0], cached={1: 1600}), 1) == 16
    # 320 × (3 + 1) < 1,600 × 1, but 320 × (5 + 1) > 1,600: load outweighs the hit
    assert r.costs(c, View([0, 3], cached={1: 1280}))[0] == [1600.0, 1280.0]
    assert r.costs(c, View([0, 5], cached={1: 1280}))[0] == [1600.0, 1920.0]
    assert r.route(c, View([0, 3], cached={1: 1280}), 0.0) == 1
    assert r.route(call("b", ((1, 1600),)), View([0, 5], cached={1: 1280}), 0.0) == 0
    # a tie goes to the first worker
    assert r.pick([1600.0, 1600.0], [1600, 320], View([0, 4])) == 0


def test_kv_aware_counts_the_prefills_it_sent_until_they_end():
    r = KvAware(np.random.default_rng(0), block_size=16)
    a, b = call("a", ((1, 1600),)), call("b", ((2, 1600),))
    assert r.route(a, View([0, 0]), 0.0) == 0  # a tie: the first
    # b: (1,600 + a's 1,600 pending) × 2 on 0 against 1,600 × 1 on 1
    assert r.costs(b, View([1, 0]))[0] == [6400.0, 1600.0]
    assert r.route(b, View([1, 0]), 0.1) == 1
    r.completed(0, a, 2.0)
    assert r.costs(b, View([0, 1]))[0] == [1600.0, 6400.0]  # a's prefill left with it


def test_kv_aware_temperature_draws_by_cost():
    costs, ptokens, v = [100.0, 120.0], [100, 120], View([0, 0])
    cold = KvAware(np.random.default_rng(0), router_temperature=0.0)
    assert all(cold.pick(costs, ptokens, v) == 0 for _ in range(20))
    warm = KvAware(np.random.default_rng(0), router_temperature=20.0)
    picks = [warm.pick(costs, ptokens, v) for _ in range(400)]
    # P(1) = e^-1 / (1 + e^-1) ≈ 0.27
    assert 0.2 < picks.count(1) / len(picks) < 0.35


def test_kv_aware_session_affinity_is_an_idle_ttl():
    r = KvAware(np.random.default_rng(0), kv_aware_session_affinity_ttl_secs=10)
    c = call("a", ((1, 1600),))
    assert r.route(c, View([0, 0], [0, 0], cached={1: 1600}), 0.0) == 1
    # bound: a request while one is in flight stays, wherever the cache is
    assert r.route(call("a", ((1, 1600),), 1), View([0, 1], cached={0: 1600}), 1.0) == 1
    r.completed(1, c, 3.0)
    r.completed(1, c, 4.0)  # the last in flight: idle from 4.0, expires at 14.0
    # within 10 s of the last answer: back to 1, though 0 now holds all of it
    assert r.route(call("a", ((1, 1600),), 2), View([0, 0], cached={0: 1600}), 13.0) == 1
    r.completed(1, c, 14.0)
    # idle 10.5 s: the binding expired, the cost decides (and binds anew)
    assert r.route(call("a", ((1, 1600),), 3), View([0, 0], cached={0: 1600}), 24.5) == 0
    assert r.route(call("a", ((1, 1600),), 4), View([0, 0], cached={1: 1600}), 25.0) == 0
    # no affinity without the flag: each request placed by cost
    free = KvAware(np.random.default_rng(0))
    assert free.route(c, View([0, 0], cached={1: 1600}), 0.0) == 1
    assert free.route(call("a", ((1, 1600),), 1), View([0, 1], cached={0: 1600}), 1.0) == 0


def test_sticky_least_loaded_counts_sessions_not_requests():
    r = StickyLeastLoaded()
    v = View([0, 0, 0])
    picks = [r.route(call(f"s{i}", ((i, 10),)), v, 0.0) for i in range(3)]
    assert sorted(picks) == [0, 1, 2]  # each new session to a replica with fewest sessions
    # a known session stays put, however loaded
    assert r.route(call("s0", ((0, 10),), 1), View([99, 0, 0]), 1.0) == picks[0]
    # sessions expire after 7,200 s unseen (swept at most once a minute)
    r.route(call("s3", ((3, 10),)), v, 7300.0)
    assert len(r._sessions) == 1


def test_pin_aware_goes_home_unless_its_queue_is_over_the_bound():
    r = PinAware(pin_queue_bound=4)
    c = call("a", ((1, 100),), 1)
    assert r.route(c, View([4, 0], previous={"a": 0}), 0.0) == 0  # 4 − 0 ≤ 4: home
    # over the bound: where the prefix is cached, else the least loaded
    assert r.route(c, View([5, 0, 3], previous={"a": 0}, cached={2: 64}), 0.0) == 2  # 5 − 0 > 4
    assert r.route(c, View([6, 2, 1], previous={"a": 0}), 0.0) == 2
    # a first call: where its prefix is cached (a shared system prompt), else least loaded
    assert r.route(call("b", ((1, 100),)), View([1, 1], cached={1: 32}), 0.0) == 1
    assert r.route(call("b", ((1, 100),)), View([1, 0]), 0.0) == 1


def test_settings_take_the_real_flags_and_refuse_others():
    assert RouterSettings("cache-aware").resolved() == {
        "cache_threshold": 0.3,
        "balance_abs_threshold": 64,
        "balance_rel_threshold": 1.5,
    }
    assert RouterSettings("cache_aware").name == "cache-aware"  # vllm-router's spelling
    with pytest.raises(ConfigError, match="--cache-threshold: the round-robin router"):
        RouterSettings("round-robin", cache_threshold=0.5)
    with pytest.raises(ConfigError, match="--router: unknown router 'nope'"):
        RouterSettings("nope")
    with pytest.raises(ConfigError, match="--kv-aware-session-affinity-ttl-secs"):
        RouterSettings("kv-aware", kv_aware_session_affinity_ttl_secs=0)
    with pytest.raises(ConfigError, match="--replicas 2: the trace's replica column names 3"):
        make_router(
            RouterSettings("as-logged"), 2, seed=0, block_size=16, logged_replicas=["a", "b", "c"]
        )


@pytest.mark.parametrize(
    ("name", "settings", "message"),
    [
        ("cache-aware", {"cache_threshold": 1.5}, "--cache-threshold: 1.5 is out of range (0..1)"),
        (
            "cache-aware",
            {"balance_abs_threshold": 12.5},
            "--balance-abs-threshold: 12.5 is not an integer",
        ),
        (
            "kv-aware",
            {"kv_aware_session_affinity_ttl_secs": 30.5},
            "--kv-aware-session-affinity-ttl-secs: 30.5 is not an integer",
        ),
        (
            "kv-aware",
            {"kv_aware_session_affinity_ttl_secs": 0},
            "--kv-aware-session-affinity-ttl-secs: 0 is out of range (1..31536000)",
        ),
        (
            "kv-aware",
            {"router_temperature": -1},
            "--router-temperature: -1 is out of range (0 or more)",
        ),
        ("pin-aware", {"pin_queue_bound": True}, "--pin-queue-bound: true is not an integer"),
    ],
)
def test_settings_vllm_router_would_refuse_are_refused_in_one_line(
    name: str, settings: dict[str, object], message: str
) -> None:
    """As vllm-router's parser takes its flags (ttlctl.router_doc's table): a fraction for
    an int flag (its parser's int()), a value out of the flag's range."""
    with pytest.raises(ConfigError) as caught:
        RouterSettings(name, **settings)  # type: ignore[arg-type]
    assert str(caught.value) == message


def test_worker_urls_one_per_replica() -> None:
    urls = ("http://127.0.0.1:1", "http://127.0.0.1:2")
    assert FleetSpec(2, RouterSettings("consistent-hash"), worker_urls=urls).describe()[
        "worker_urls"
    ] == list(urls)
    with pytest.raises(ConfigError, match="--worker-urls: 1 URL given for 2 replicas"):
        FleetSpec(2, RouterSettings("consistent-hash"), worker_urls=urls[:1])
    with pytest.raises(ConfigError, match=r"--worker-urls: 2 URLs given for 1 replica$"):
        FleetSpec(1, RouterSettings("consistent-hash"), worker_urls=urls)
    with pytest.raises(ConfigError, match="given twice"):
        FleetSpec(2, RouterSettings("consistent-hash"), worker_urls=(urls[0], urls[0]))
    # without URLs: the documented default names, replica i as http://replica-i
    named = ConsistentHash(2, ("http://replica-0", "http://replica-1"))
    assert all(ConsistentHash(2).owner(f"s{i}") == named.owner(f"s{i}") for i in range(50))


def test_kv_aware_drops_a_pending_prefill_at_its_first_output_chunk():
    """vllm-router 0.1.17: ``KvRequestSlot::begin_decode`` takes a request's prefill tokens
    off its worker when the first chunk of its response streams through the router, not
    when the response ends; the request still counts in the batch until then."""
    r = KvAware(np.random.default_rng(0), block_size=16)
    a, b = call("a", ((1, 1600),)), call("b", ((2, 1600),))
    assert r.route(a, View([0, 0]), 0.0) == 0
    # a is still prefilling: its 1,600 tokens weigh on replica 0
    assert r.costs(b, View([1, 0]))[0] == [6400.0, 1600.0]
    # a streamed its first token: its prefill is off replica 0 at b's placement, while a
    # itself is still in flight there (the batch term): 1,600 × 2 against 1,600 × 1
    assert r.route(b, View([1, 0], started={"a"}), 0.5) == 1
    assert r._prefilling == {0: 0, 1: 1600}
    # c: b is still prefilling on 1, a decoding on 0: 0 is the cheaper
    c = call("c", ((3, 1600),))
    assert r.costs(c, View([1, 1], started={"a"}))[0] == [3200.0, 6400.0]
    r.completed(0, a, 2.0)  # taken off once only
    assert r._prefilling == {0: 0, 1: 1600}
    r.completed(1, b, 2.5)  # ended before a first chunk was seen: off at its end
    assert r._prefilling == {0: 0, 1: 0}


def test_random_draws_each_replica_alike_whatever_the_load() -> None:
    r = RandomPick(np.random.default_rng(0))
    v = View([50, 0, 0])
    picks = Counter(r.route(call("p", ((1, 10),)), v, 0.0) for _ in range(600))
    assert sorted(picks) == [0, 1, 2]
    assert all(150 < picks[i] < 250 for i in range(3))  # 200 each, give or take


def test_power_of_two_keeps_the_first_draw_on_a_tie() -> None:
    # vllm-router's power_of_two.rs: ``if load1 <= load2 { idx1 } else { idx2 }``
    v = View([3, 3, 3, 3])
    for seed in range(20):
        first = int(np.random.default_rng(seed).integers(4))
        assert PowerOfTwo(np.random.default_rng(seed)).route(call("p", ((1, 10),)), v, 0.0) == first


def test_the_ring_takes_the_first_node_at_or_after_the_key_and_wraps_around() -> None:
    # at: swe-094207's key hashes to node 98 of the default two-replica ring exactly
    # (FurcHash's 2²³−1 buckets); that node is replica 0's, the next one replica 1's
    ring = HashRing(default_urls(2))
    at = ring._points.index(fbi_hash(session_key("swe-094207")))
    assert ring._owners[at] == 0 and ring._owners[at + 1] == 1
    assert ring.owner("swe-094207") == 0
    # after the last node: around to the first
    sparse = HashRing(default_urls(2), virtual_nodes=1)
    assert sparse._owners[0] != sparse._owners[-1]
    late = next(
        s for s in (f"s{i}" for i in range(1000))
        if fbi_hash(session_key(s)) > sparse._points[-1]
    )  # fmt: skip
    assert sparse.owner(late) == sparse._owners[0]


def test_two_workers_nodes_at_one_hash_go_to_the_later_worker() -> None:
    # replica-10's node 9 and replica-30's node 123 hash alike: a BTreeMap insert, the
    # later worker's node replaces the earlier one's
    node = fbi_hash("http://replica-10:9")
    assert node == fbi_hash("http://replica-30:123")
    ring = HashRing(default_urls(31))
    assert ring._owners[ring._points.index(node)] == 30


def test_furc_puts_a_key_in_one_of_m_buckets_and_moves_it_only_to_a_new_one() -> None:
    for i in range(200):
        key = f"k{i}".encode()
        for m in range(1, 40):
            bucket = furc(key, m)
            assert 0 <= bucket < m
            # consistent: one bucket more moves keys only into the new bucket
            assert furc(key, m + 1) in (bucket, m)


def test_sticky_least_loaded_expires_a_session_unseen_for_its_expiration() -> None:
    # sticky_least_loaded.rs: each request refreshes its session's last access; a sweep
    # drops sessions with ``now − last_access >= expiration`` and their worker's count
    r, v = StickyLeastLoaded(), View([0, 0])
    assert r.route(call("a", ((1, 10),)), v, 0.0) == 1
    assert r.route(call("b", ((2, 10),)), v, 0.0) == 0
    r.route(call("a", ((1, 10),), 1), v, 3600.0)  # a seen again
    # 7,200 s after b's last request: b expires, a (seen 3,600 s ago) stays; replica 0
    # then holds no session, and c goes there, though its rendezvous weight is replica 1's
    assert r.route(call("c2", ((3, 10),)), v, 7200.0) == 0
    assert set(r._sessions) == {"a", "c2"}


def test_pin_aware_leaves_a_home_over_its_bound_for_the_cache_else_the_least_loaded() -> None:
    r = PinAware(pin_queue_bound=4)
    c = call("a", ((1, 100),), 1)
    # the bound counts beyond the least loaded replica: 10 − 6 ≤ 4, home
    assert r.route(c, View([10, 6], previous={"a": 0}), 0.0) == 0
    # over the bound: not home, though home holds the most of the prompt
    assert r.route(c, View([9, 0, 0], previous={"a": 0}, cached={0: 100, 2: 32}), 0.0) == 2
    # nothing cached elsewhere: the first least loaded replica
    assert r.route(c, View([9, 1, 1], previous={"a": 0}), 0.0) == 1


def test_cache_aware_threshold_and_balance_bounds_are_strict() -> None:
    # a match rate of exactly --cache-threshold is not above it: the least loaded
    r = CacheAware()
    r.route(call("a", ((1, 300),)), View([0, 0]), 0.0)  # learnt by worker 0
    assert r.route(call("b", ((1, 300), (2, 700))), View([1, 0]), 1.0) == 1  # 300/1000
    # max − min exactly --balance-abs-threshold is balanced: the match wins
    r = CacheAware()
    r.route(call("a", ((1, 1000),)), View([0, 0]), 0.0)
    assert r.route(call("a", ((1, 1000), (2, 10)), 1), View([96, 32]), 1.0) == 0


def test_prompt_tree_counts_what_each_worker_was_sent_of_a_run() -> None:
    tree = PromptTree()
    tree.insert(((1, 100),), 0)
    # a run held in part matches that part only
    assert tree.longest_match(((1, 300),)) == (100, 0)
    tree.insert(((1, 300),), 0)  # the same worker sent more of it: it holds more
    assert tree.longest_match(((1, 300),)) == (300, 0)
    shared = PromptTree()
    shared.insert(((1, 100),), 0)
    shared.insert(((1, 100),), 1)
    shared.insert(((1, 300),), 1)  # held by two workers, one sent more
    assert shared.longest_match(((1, 300),)) == (300, 1)


def test_prompt_tree_tie_goes_to_the_lower_worker() -> None:
    tree = PromptTree()
    tree.insert(((1, 100),), 1)
    tree.insert(((1, 100),), 0)
    assert tree.longest_match(((1, 100), (2, 5))) == (100, 0)
    # also once one worker alone walks on through runs of no tokens
    tree = PromptTree()
    tree.insert(((1, 10),), 0)
    tree.insert(((1, 10), (2, 0), (3, 0)), 1)
    assert tree.longest_match(((1, 10), (2, 0), (3, 5))) == (10, 0)


def test_kv_aware_counts_the_prefill_the_chosen_worker_has_to_do() -> None:
    r = KvAware(np.random.default_rng(0), block_size=16)
    # a goes to replica 1, which holds 1,280 of its 1,600 tokens: 320 pending there
    assert r.route(call("a", ((1, 1600),)), View([0, 0], cached={1: 1280}), 0.0) == 1
    assert r.costs(call("b", ((2, 1600),)), View([0, 1]))[0] == [1600.0, (1600 + 320) * 2.0]


def test_kv_aware_costs_of_zero_pick_by_prefill_then_batch() -> None:
    for temperature in (0.0, 20.0):
        r = KvAware(np.random.default_rng(0), router_temperature=temperature)
        assert all(r.pick([0.0, 0.0], [0, 0], View([3, 1])) == 1 for _ in range(20))
