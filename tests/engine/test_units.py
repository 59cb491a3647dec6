"""The plugin's vLLM-free parts: bookkeeping stays bounded, pins expire, bundles reload."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from fitting.durations import Prior
from fitting.eta import EtaSums
from fitting.policy import TTLPolicy
from fitting.policy_params import PolicyParams
from tests.bundles import write_bundle
from ttlctl.engine import tags
from ttlctl.engine.counters import Counters
from ttlctl.engine.enginelog import EngineLog, Record
from ttlctl.engine.facts import EngineFacts
from ttlctl.engine.pins import Pin, PinTable
from ttlctl.engine.programs import ProgramBook
from ttlctl.engine.retention import ABORTED, FAILED, OK, Retention
from ttlctl.engine.source import PolicySource
from ttlctl.engine.watch import BundleWatcher
from ttlctl.ingest import fields


def policy(**params: Any) -> TTLPolicy:
    return TTLPolicy.create(PolicyParams(**params), lambda tokens, offload: 0.01)


class Pool:
    """Stands in for vLLM's block pool: counts references handed back."""

    def __init__(self) -> None:
        self.freed = 0

    def free(self, blocks: Any) -> None:
        self.freed += len(blocks)


def retention(
    pol: TTLPolicy | None, capacity: int = 1000, cap: int = 100_000
) -> tuple[Retention, Pool]:
    pool = Pool()
    r = Retention(
        PolicySource(pol) if pol is not None else None,
        free=pool.free,
        capacity_blocks=capacity,
        program_cap=cap,
        counters=Counters(export=False),
    )
    return r, pool


def test_tags_from_xargs_and_session() -> None:
    assert tags.parse({"program_id": "p", "tool": "bash", "is_last": "1"}) == tags.Tags(
        "p", "bash", True
    )
    assert tags.parse({"is_last": 0}, session_id="s").program == "s"
    assert tags.parse({"program_id": 7}).program == "7"
    assert tags.parse(None) == tags.Tags(None, None, None)
    assert tags.parse({"is_last": "false"}).is_last is False
    assert tags.parse({"is_last": "maybe"}).is_last is None


@dataclass
class _Params:
    extra_args: Any


@dataclass
class _Request:
    sampling_params: Any
    session_id: str | None = None


def test_a_requests_tags_come_from_its_xargs_and_its_session_header() -> None:
    """docs/deploy.md: without ``program_id`` the ``X-Session-ID`` header (vLLM's
    ``request.session_id``) stands in for it; with neither, no program."""
    by_header = tags.of_request(_Request(_Params({"tool": "bash"}), session_id="job-42"))
    assert by_header == tags.Tags("job-42", "bash", None)
    both = _Request(_Params({"program_id": "p", "is_last": "true"}), session_id="job-42")
    assert tags.of_request(both) == tags.Tags("p", None, True)
    assert tags.of_request(_Request(None, session_id="s")).program == "s"
    assert tags.of_request(_Request(_Params(None))) == tags.Tags(None, None, None)
    # an empty header is no header: not one program shared by every call that sends it
    assert tags.parse({"program_id": ""}, session_id="") == tags.Tags(None, None, None)


@pytest.mark.parametrize("tool", ["bash", " bash ", "\tgrep\n", "", "   ", "web search"])
def test_a_tools_name_is_read_as_the_engine_logs_reader_reads_it(tool: str) -> None:
    """The plugin looks up a tool's τ by the name the bundle was fitted on, and the bundle
    is fitted on the names ingest reads from the engine log: blanks around a name are not
    part of it, and a blank name is no tool, on both sides."""
    assert tags.parse({"program_id": "p", "tool": tool}).tool == fields.tool_name(tool)


def test_a_new_program_at_the_cap_never_takes_the_book_past_it() -> None:
    """Regression: an arrival pruned before it added its program, so a new program at the
    cap left the book one over it (Retention.check's invariant broken) until a finish."""
    r, _ = retention(None, cap=2)
    for i, name in enumerate("ABC"):
        r.arrive(name, tags.Tags(name, None, None), now=float(i))
        assert len(r.book) <= 2
        r.check()
    assert "A" not in r.book and "C" in r.book


def test_program_book_is_bounded_by_cap_and_idle_time() -> None:
    book = ProgramBook(cap=1000, idle_s=60.0)
    for i in range(5000):
        book.arrive(f"p{i}", now=i * 0.001)
        book.finish(f"p{i}", now=i * 0.001, tool="bash")
    assert len(book) == 1000 and book.dropped == 4000
    assert "p4999" in book and "p0" not in book
    book.arrive("late", now=1000.0)  # everyone else idle for > 60 s
    assert len(book) == 1
    book.end("late")
    assert len(book) == 0


def test_pause_and_queue_delay_are_learned_like_the_simulator() -> None:
    pol = policy(cold_start_ttl_s=5.0, k=0)
    r, _ = retention(pol)
    r.arrive("a1", tags.Tags("A", "grep", None), now=0.0)
    assert r.finish("a1", OK, 1000, now=1.0) == 5.0
    r.forget("a1")  # not pinned: the program comes back without a pin
    r.arrive("a2", tags.Tags("A", "grep", None), now=3.5)
    assert list(pol.tools["grep"].recent) == [2.5]
    r.admitted("a2", now=4.0, cached_tokens=0)
    assert pol.queue_delay_s == pytest.approx(0.5)
    r.arrive("a3", tags.Tags("A", None, True), now=5.0)  # wait: a2 never finished
    r.finish("a2", OK, 10, now=6.0)
    r.finish("a3", OK, 10, now=7.0)
    assert pol.eta_sums.programs == 1  # the program ended (is_last), 3 calls
    assert "A" not in r.book


def test_thousands_of_programs_leave_no_pin_past_ttl_and_bounded_state() -> None:
    r, pool = retention(policy(cold_start_ttl_s=2.0), capacity=10**9, cap=1000)
    for i in range(5000):
        rid, t = f"r{i}", i * 0.001
        r.arrive(rid, tags.Tags(f"p{i}", "bash", None), now=t)
        ttl = r.finish(rid, OK, 500, now=t)
        assert ttl == 2.0
        assert r.pin(rid, [object()] * 4, ttl, now=t)
        r.forget(rid)
    assert len(r.pins) == 5000 and r.pins.blocks == 20000 and not r.live
    assert len(r.book) == 1000  # the program cap
    assert r.expire(now=4.0, waiting=lambda program: False) == 2001  # expiry t + 2 <= 4
    r.expire(now=7.1, waiting=lambda program: False)
    assert len(r.pins) == 0 and r.pins.blocks == 0 and pool.freed == 20000
    assert r.counters.expired == 5000 and r.counters.pinned_blocks == 0
    assert len(r.pins._heap) <= 64
    r.check()


def test_expiry_waits_for_a_waiting_follow_up_and_handover_counts_a_hit() -> None:
    r, pool = retention(policy(cold_start_ttl_s=1.0))
    r.arrive("a", tags.Tags("A", "t", None), now=0.0)
    r.pin("a", [1, 2, 3], r.finish("a", OK, 96, now=0.0), now=0.0)
    r.forget("a")
    r.arrive("b", tags.Tags("A", "t", None), now=0.5)
    assert r.expire(now=2.0, waiting=lambda p: p == "A") == 0 and "A" in r.pins
    r.admitted("b", now=2.5, cached_tokens=64)
    assert "A" not in r.pins and r.counters.hit == 1 and pool.freed == 3


def test_a_parked_pin_goes_at_the_next_expiry_once_its_programs_call_left() -> None:
    """A pin past its expiry whose program's call waits is parked (off the expiry heap:
    it costs nothing per step and does not count as the next expiry); when the call
    leaves the queue without being admitted (an abort, a stop on stale output) the pin
    is due again and goes at the next expiry."""
    r, pool = retention(policy(cold_start_ttl_s=1.0))
    for name in ("A", "B"):
        r.arrive(name, tags.Tags(name, "t", None), now=0.0)
        r.pin(name, [1, 2], r.finish(name, OK, 64, now=0.0), now=0.0 if name == "A" else 0.5)
        r.forget(name)
    r.arrive("a2", tags.Tags("A", "t", None), now=0.2)
    waiting = {"A"}
    assert r.expire(now=1.2, waiting=waiting.__contains__) == 0
    assert r.next_expiry() == 1.5  # B's; A's is parked
    r.check()
    assert r.expire(now=3.0, waiting=waiting.__contains__) == 1  # B expires, A stays
    assert "A" in r.pins and r.next_expiry() is None
    waiting.clear()
    r.unpark("A")
    assert r.next_expiry() == 1.0
    assert r.expire(now=3.1, waiting=waiting.__contains__) == 1
    assert not r.pins and pool.freed == 4 and r.counters.expired == 2
    r.check()


def test_the_queue_key_is_the_rules_order() -> None:
    """Preempted first, then the vLLM priority, a live pin, the program's first arrival and
    its order, the call's arrival and its order; an unknown call last among its peers."""
    r, _ = retention(policy(cold_start_ttl_s=10.0))
    r.arrive("p1", tags.Tags("P", "t", None), now=0.0)
    r.pin("p1", [1], r.finish("p1", OK, 32, now=0.0), now=0.0)
    r.forget("p1")
    q = r.arrive("q", tags.Tags("Q", None, None), now=1.0)
    p = r.arrive("p2", tags.Tags("P", None, None), now=2.0)
    assert r.key(p, preempted=False) < r.key(q, preempted=False)  # pinned first
    assert r.key(q, preempted=True) < r.key(p, preempted=False)
    assert r.key(q, preempted=False, priority=-1.0) < r.key(p, preempted=False)
    r.release("P", "expired")
    # no pin either way: P's program started first, although Q's call arrived first
    assert (p.program_start, q.program_start) == (0.0, 1.0) and p.arrival > q.arrival
    assert r.key(p, preempted=False) < r.key(q, preempted=False)
    assert r.key(None, preempted=False) > r.key(q, preempted=False)


def test_aborts_never_pin_and_release_the_programs_pin() -> None:
    r, _ = retention(policy(cold_start_ttl_s=10.0))
    r.arrive("a", tags.Tags("A", "t", None), now=0.0)
    r.pin("a", [1], r.finish("a", OK, 32, now=0.0), now=0.0)
    r.forget("a")
    r.arrive("b", tags.Tags("A", "t", None), now=1.0)
    assert r.finish("b", ABORTED, 32, now=1.5) == 0.0
    assert "A" not in r.pins and r.counters.dropped == 1


def test_pin_cap_and_pins_off() -> None:
    r, _ = retention(policy(cold_start_ttl_s=10.0, pin_cap=0.5), capacity=10)
    for i, n in enumerate((4, 2)):
        r.arrive(f"r{i}", tags.Tags(f"p{i}", None, None), now=0.0)
        ttl = r.finish(f"r{i}", OK, 32, now=0.0)
        assert r.pin(f"r{i}", [0] * n, ttl, now=0.0) is (i == 0)
    assert r.counters.refused == 1 and r.pins.blocks == 4
    off, _ = retention(policy(cold_start_ttl_s=10.0, pins=False))
    off.arrive("x", tags.Tags("X", None, None), now=0.0)
    assert off.finish("x", OK, 32, now=0.0) == 0.0


def test_a_refused_pin_leaves_the_programs_earlier_pin_in_place() -> None:
    """Two calls of one program in flight: the later finish replaces the earlier pin only
    when it fits the cap (checked without the earlier pin); refused, the earlier one stays."""
    r, pool = retention(policy(cold_start_ttl_s=10.0, pin_cap=0.5), capacity=10)
    for rid in ("a", "b", "c"):
        r.arrive(rid, tags.Tags("P", "t", None), now=0.0)
    assert r.pin("a", [0] * 3, r.finish("a", OK, 32, now=1.0), now=1.0)
    # b's 6 blocks do not fit beside a's 3 (cap 5), nor alone: refused, a's pin stays
    assert not r.pin("b", [0] * 6, r.finish("b", OK, 32, now=2.0), now=2.0)
    pin = r.pins.get("P")
    assert pin is not None and pin.n_blocks == 3 and pin.created == 1.0
    assert r.live["b"].pin_skipped == "refused" and pool.freed == 0
    # c's 4 blocks fit once a's pin is replaced (4 + 3 would not): it wins
    assert r.pin("c", [0] * 4, r.finish("c", OK, 32, now=3.0), now=3.0)
    pin = r.pins.get("P")
    assert pin is not None and pin.n_blocks == 4 and r.pins.blocks == 4
    assert (r.counters.refused, r.counters.dropped, pool.freed) == (1, 1, 3)
    r.check()


def test_a_deferred_free_is_counted_and_noted_on_the_call() -> None:
    r, _ = retention(policy(cold_start_ttl_s=10.0))
    r.arrive("a", tags.Tags("P", "t", None), now=0.0)
    assert r.finish("a", OK, 32, now=1.0) > 0
    r.deferred("a")
    assert r.counters.deferred == 1 and r.live["a"].pin_skipped == "deferred"
    assert r.counters.snapshot()["deferred"] == 1 and not r.pins
    r.check()


def test_valve_order_latest_program_first_and_stall_only() -> None:
    r, _ = retention(policy(cold_start_ttl_s=10.0, valve="head"))
    for i, name in enumerate(["old", "mid", "new", "head"]):
        r.arrive(name, tags.Tags(name, None, None), now=float(i))
        r.pin(name, [i], r.finish(name, OK, 32, now=float(i)), now=float(i))
    assert list(r.valve_order("head", stalled=False)) == ["new", "mid", "old"]
    assert list(r.valve_order("head", stalled=True)) == ["new", "mid", "old", "head"]
    r.policy = policy(cold_start_ttl_s=10.0, valve="stall-only")
    assert list(r.valve_order("head", stalled=False)) == []
    assert next(r.valve_order("head", stalled=True)) == "new"


def test_programs_that_start_at_the_same_instant_keep_their_arrival_order() -> None:
    """Ties in program start (same clock reading) are broken by arrival order, as in
    the simulator: the valve releases the later arrival first, whatever the names,
    and a follow-up carries its program's first arrival order (the queue key)."""
    r, _ = retention(policy(cold_start_ttl_s=10.0, valve="head"))
    for name in ["zeta", "alpha"]:  # zeta arrives first; names sort the other way
        r.arrive(name, tags.Tags(name, None, None), now=0.0)
        r.pin(name, [0], r.finish(name, OK, 32, now=0.0), now=0.0)
        r.forget(name)
    assert list(r.valve_order(None, stalled=False)) == ["alpha", "zeta"]
    first = r.arrive("zeta-1", tags.Tags("zeta", None, None), now=1.0)
    second = r.arrive("alpha-1", tags.Tags("alpha", None, None), now=1.0)
    assert first.program_start == second.program_start == 0.0
    assert first.program_seq < second.program_seq < first.seq


def test_watcher_reloads_keeps_policy_on_damage_and_warns_once(tmp_path: Path) -> None:
    path = write_bundle(tmp_path / "b.json", cold_start_ttl_s=3.0)
    warned: list[str] = []
    w = BundleWatcher.from_env(
        {"TTLCTL_BUNDLE": str(path), "TTLCTL_BUNDLE_CHECK_S": "5"}, warned.append, lambda m: None
    )
    assert w.policy is not None and w.policy.params.cold_start_ttl_s == 3.0 and not warned
    first = w.policy
    path.write_text(path.read_text()[:-40])  # truncated
    assert not w.poll(now=100.0) and w.policy is first and len(warned) == 1
    # one line: what was refused, what is kept, the file and why (not the start-up message)
    assert warned[0].startswith(
        f"ttlctl: new bundle refused, keeping the policy in force: {path}: line "
    )
    assert "\n" not in warned[0] and warned[0].count("ttlctl:") == 1
    assert "stock vLLM" not in warned[0]
    assert not w.poll(now=100.1)  # checked at most every 5 s
    assert not w.poll(now=106.0) and len(warned) == 1  # same damaged file: no second warning
    write_bundle(path, cold_start_ttl_s=7.0)
    assert w.poll(now=112.0) and w.policy.params.cold_start_ttl_s == 7.0 and w.reloads == 1


def test_the_watcher_sees_a_new_file_of_the_same_size_and_time(tmp_path: Path) -> None:
    """A file swapped in by a rename (a ConfigMap update, ``bundle rollback``) with the
    size and modification time of the one it replaces is still a new file: the watcher
    looks at the inode too."""
    path = write_bundle(tmp_path / "b.json", cold_start_ttl_s=3.0)
    w = BundleWatcher.from_env({"TTLCTL_BUNDLE": str(path)}, [].append, lambda m: None)
    new = write_bundle(tmp_path / "new.json", cold_start_ttl_s=7.0)
    assert new.stat().st_size == path.stat().st_size
    old = path.stat()
    os.utime(new, ns=(old.st_atime_ns, old.st_mtime_ns))
    new.rename(path)
    assert path.stat().st_ino != old.st_ino and path.stat().st_mtime_ns == old.st_mtime_ns
    assert w.poll(now=100.0) and w.policy is not None
    assert w.policy.params.cold_start_ttl_s == 7.0 and w.reloads == 1


def test_a_watcher_checks_at_the_end_of_its_interval(tmp_path: Path) -> None:
    """``TTLCTL_BUNDLE_CHECK_S`` is the time between checks: a change is seen at it."""
    path = write_bundle(tmp_path / "b.json", cold_start_ttl_s=3.0)
    env = {"TTLCTL_BUNDLE": str(path), "TTLCTL_BUNDLE_CHECK_S": "5"}
    w = BundleWatcher.from_env(env, [].append, lambda m: None)
    assert not w.poll(now=100.0)
    write_bundle(path, cold_start_ttl_s=7.0)
    assert not w.poll(now=104.0)
    assert w.poll(now=105.0) and w.reloads == 1


def test_an_empty_bundle_variable_is_no_bundle_not_a_refused_one() -> None:
    warned: list[str] = []
    w = BundleWatcher.from_env({"TTLCTL_BUNDLE": ""}, warned.append, lambda m: None)
    assert w.path is None and w.policy is None and w.refused == 0 and len(warned) == 1
    assert "TTLCTL_BUNDLE unset" in warned[0]


@pytest.mark.parametrize(
    ("value", "every_s", "warns"),
    [
        ("abc", 2.0, True),
        ("-1", 2.0, True),
        ("nan", 2.0, True),
        ("inf", 2.0, True),
        ("", 2.0, False),  # unset
        ("0", 0.0, False),
        ("0.5", 0.5, False),
    ],
)
def test_a_bad_bundle_check_interval_warns_once_naming_the_value(
    tmp_path: Path, value: str, every_s: float, warns: bool
) -> None:
    """As TTLCTL_MAX_PROGRAMS: a value that is not seconds >= 0 warns once, naming it,
    and the default (2 s) holds; the watcher still serves its bundle."""
    path = write_bundle(tmp_path / "b.json", cold_start_ttl_s=3.0)
    warned: list[str] = []
    w = BundleWatcher.from_env(
        {"TTLCTL_BUNDLE": str(path), "TTLCTL_BUNDLE_CHECK_S": value},
        warned.append,
        lambda m: None,
    )
    assert w.every_s == every_s and w.policy is not None
    assert len(warned) == warns, warned
    if warns:
        assert warned[0] == (
            f"ttlctl: TTLCTL_BUNDLE_CHECK_S={value!r} is not a number of seconds >= 0; "
            "checking the bundle every 2 s"
        )


def test_no_or_damaged_bundle_at_start_warns_once(tmp_path: Path) -> None:
    warned: list[str] = []
    w = BundleWatcher.from_env({}, warned.append, lambda m: None)
    assert w.policy is None and len(warned) == 1 and "no bundle" in warned[0]
    assert not w.poll(now=1e9)
    bad = tmp_path / "bad.json"
    doc = json.loads(write_bundle(bad, cold_start_ttl_s=3.0).read_text())
    doc["policy"]["eta"] = 0.25
    bad.write_text(json.dumps(doc))
    warned.clear()
    w = BundleWatcher.from_env({"TTLCTL_BUNDLE": str(bad)}, warned.append, lambda m: None)
    assert w.policy is None and len(warned) == 1 and "checksum" in warned[0]
    assert not w.poll(now=1e9) and len(warned) == 1


def test_engine_log_survives_io_errors(tmp_path: Path) -> None:
    warned: list[str] = []
    log = EngineLog(str(tmp_path), warned.append)  # a directory: every open fails
    rec = Record("r", "p", None, None, 1.0, None, 2.0, 10, 1, None, "length", 0.0)
    for _ in range(3):
        log.write(rec)
    assert log.errors == 3 and len(warned) == 1
    good = EngineLog(str(tmp_path / "log.jsonl"), warned.append)
    good.write(rec)
    line = json.loads((tmp_path / "log.jsonl").read_text())
    assert line["schema"] == "ttlctl.engine-log/1" and line["ttl_s"] == 0.0
    assert os.path.getsize(tmp_path / "log.jsonl") > 0  # flushed, not buffered


def test_engine_log_states_the_engines_facts_first_on_change_and_after_a_truncation(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log.jsonl"
    log = EngineLog(str(path), [].append)
    facts = EngineFacts("0.32.0", "m", 32, 63, 8, 512, 1024, False, True, "ab" * 32, "r1")
    rec = Record("r", "p", None, None, 1.0, None, 2.0, 10, 1, None, "length", 0.0)
    log.write_facts(facts)
    log.write_facts(facts)  # unchanged: not written again
    log.write(rec)
    log.write_facts(replace(facts, bundle_sha256="cd" * 32))  # a new bundle
    kinds = [json.loads(x).get("kind") for x in path.read_text().splitlines()]
    assert kinds == ["engine", None, "engine"]
    first = json.loads(path.read_text().splitlines()[0])
    assert first["schema"] == "ttlctl.engine-log/1" and first["replica"] == "r1"
    assert (first["kv_blocks"], first["block_size"], first["kv_tokens"]) == (63, 32, 2016)
    path.write_text("")  # rotated with copytruncate
    log.write(rec)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x.get("kind") for x in lines] == ["engine", None]
    assert lines[0]["bundle_sha256"] == "cd" * 32


def _rotated_log(path: Path) -> EngineLog:
    """An engine log at ``path`` with the engine's facts and call ``a`` written, then the
    file renamed to ``<path>.1`` (as logrotate does)."""
    log = EngineLog(str(path), [].append)
    facts = EngineFacts("0.32.0", "m", 32, 63, 8, 512, 1024, False, True, "ab" * 32, "r1")
    log.write_facts(facts)
    log.write(Record("a", "p", None, None, 1.0, None, 2.0, 10, 1, None, "length", 0.0))
    path.rename(path.with_name(path.name + ".1"))
    return log


def test_engine_log_reopens_a_renamed_or_removed_file(tmp_path: Path) -> None:
    """logrotate's default rotation renames the file: the next line goes to a new file at
    the path (the engine's facts first), not on into the renamed one."""
    path = tmp_path / "engine.jsonl"
    log = _rotated_log(path)
    log.write(Record("b", "p", None, None, 3.0, None, 4.0, 10, 1, None, "length", 0.0))
    old = [json.loads(x) for x in (tmp_path / "engine.jsonl.1").read_text().splitlines()]
    new = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x.get("request_id") for x in old] == [None, "a"]
    assert [x.get("kind") for x in new] == ["engine", None] and new[1]["request_id"] == "b"
    (tmp_path / "engine.jsonl.1").unlink()
    path.unlink()  # removed: a new file too
    log.write(Record("c", "p", None, None, 5.0, None, 6.0, 10, 1, None, "length", 0.0))
    assert [json.loads(x).get("request_id") for x in path.read_text().splitlines()] == [None, "c"]
    assert log.errors == 0
    log.close()


def test_engine_log_follows_a_rename_when_a_new_file_is_created_at_the_path(
    tmp_path: Path,
) -> None:
    """logrotate's ``create`` (on in most distributions' logrotate.conf): the file is renamed
    and a new empty one made at the path before the plugin's next line, which must go
    there (the path names another file), the engine's facts first."""
    path = tmp_path / "engine.jsonl"
    log = _rotated_log(path)
    path.touch()
    log.write(Record("b", "p", None, None, 3.0, None, 4.0, 10, 1, None, "length", 0.0))
    old = [json.loads(x) for x in (tmp_path / "engine.jsonl.1").read_text().splitlines()]
    new = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x.get("request_id") for x in old] == [None, "a"]
    assert [x.get("kind") for x in new] == ["engine", None] and new[1]["request_id"] == "b"
    log.close()


def test_async_variant_is_chosen_under_async_scheduling() -> None:
    from types import SimpleNamespace

    pytest.importorskip("vllm")

    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    from ttlctl.engine import TTLAsyncScheduler, TTLScheduler

    config = SimpleNamespace(scheduler_config=SimpleNamespace(async_scheduling=True))
    made = TTLScheduler.__new__(TTLScheduler, vllm_config=config)
    assert type(made) is TTLAsyncScheduler and isinstance(made, AsyncScheduler)
    sync = SimpleNamespace(scheduler_config=SimpleNamespace(async_scheduling=False))
    assert type(TTLScheduler.__new__(TTLScheduler, vllm_config=sync)) is TTLScheduler
    mro = TTLAsyncScheduler.__mro__
    assert mro.index(TTLScheduler) < mro.index(AsyncScheduler)


def test_program_queue_orders_by_the_priority_tuple_and_freezes_within_a_step() -> None:
    pytest.importorskip("vllm")
    from ttlctl.engine.queue import ProgramQueue

    pinned = {"late"}
    start = {"early": 0.0, "mid": 1.0, "late": 2.0}

    def key(r: Any) -> tuple[float, ...]:
        return (
            0.0 if r.preempted else 1.0,
            0.0 if r.program in pinned else 1.0,
            start[r.program],
            r.arrival,
        )

    @dataclass(eq=False)  # hashed by identity, like vLLM's Request
    class Req:
        program: str
        arrival: float
        preempted: bool = False

    def req(program: str, arrival: float, preempted: bool = False) -> Any:
        return Req(program, arrival, preempted)

    q = ProgramQueue(key, lambda r: r.program)  # type: ignore[attr-defined]
    a, b, c = req("mid", 5.0), req("early", 6.0), req("late", 7.0)
    for r in (a, b, c):
        q.add_request(r)
    assert list(q) == [c, b, a] and q.has_program("mid")
    pinned.clear()
    q.touch()  # a pin was released while vLLM's waiting loop runs: the order holds
    assert q.peek_request() is c and q.pop_request() is c
    q.refresh()  # the next step
    assert list(q) == [b, a]
    p = req("mid", 9.0, preempted=True)
    q.prepend_request(p)
    assert q.peek_request() is p
    q.remove_requests([p, a])
    assert list(q) == [b] and not q.has_program("mid") and len(q) == 1


def test_a_program_learns_each_pause_once_and_reports_its_number_of_calls() -> None:
    """A call that arrives while its program's previous call is still in flight measures no
    pause (none finished since the last one was measured); the program's end reports how
    many calls it made (η learns from it)."""
    pol = policy(cold_start_ttl_s=5.0, k=0)
    r, _ = retention(pol)
    r.arrive("a1", tags.Tags("A", "grep", None), now=0.0)
    r.finish("a1", OK, 1000, now=1.0)
    r.forget("a1")
    r.arrive("a2", tags.Tags("A", "grep", None), now=3.5)
    r.arrive("a3", tags.Tags("A", None, True), now=5.0)  # a2 still in flight
    assert list(pol.tools["grep"].recent) == [2.5] and pol.records == 1
    r.admitted("a3", now=5.5, cached_tokens=0)  # it did not come back from a pause
    assert len(pol.delays) == 0
    r.finish("a2", OK, 10, now=6.0)
    r.finish("a3", OK, 10, now=7.0)
    three = EtaSums()
    three.add(3)
    assert (pol.eta_sums.n, pol.eta_sums.s1, pol.eta_sums.s2, pol.eta_sums.sxy) == (
        three.n,
        three.s1,
        three.s2,
        three.sxy,
    )


def test_only_a_return_without_a_pin_reports_its_queueing_delay_and_only_once() -> None:
    """T is the mean delay of programs that came back *without* their context; a pinned
    return reports none, and a call admitted again after a preemption reports its delay
    only at its first admission."""
    pol = policy(cold_start_ttl_s=10.0, k=0)
    r, _ = retention(pol)
    r.arrive("a1", tags.Tags("A", "t", None), now=0.0)
    assert r.pin("a1", [1, 2], r.finish("a1", OK, 32, now=0.0), now=0.0)
    r.forget("a1")
    r.arrive("a2", tags.Tags("A", "t", None), now=1.0)  # its pin is live
    r.admitted("a2", now=3.0, cached_tokens=32)
    assert r.counters.hit == 1 and len(pol.delays) == 0
    r.arrive("b1", tags.Tags("B", "t", None), now=0.0)
    r.finish("b1", OK, 32, now=0.0)  # not pinned
    r.forget("b1")
    r.arrive("b2", tags.Tags("B", "t", None), now=1.0)
    r.admitted("b2", now=2.0, cached_tokens=0)
    r.admitted("b2", now=5.0, cached_tokens=0)  # preempted, admitted again
    assert list(pol.delays) == [1.0]


def test_the_last_call_drops_a_pin_its_program_still_holds() -> None:
    """Two calls in flight: the earlier one finishes (and is pinned) after the last call
    was admitted; the last call's finish ends the program and drops that pin."""
    r, pool = retention(policy(cold_start_ttl_s=10.0))
    r.arrive("a", tags.Tags("P", "t", None), now=0.0)
    r.arrive("b", tags.Tags("P", None, True), now=0.5)
    r.admitted("b", now=0.6, cached_tokens=0)
    assert r.pin("a", [1, 2, 3], r.finish("a", OK, 32, now=1.0), now=1.0)
    assert r.finish("b", OK, 32, now=2.0) == 0.0
    assert "P" not in r.pins and r.counters.dropped == 1 and pool.freed == 3
    r.check()


def test_a_failed_call_is_neither_pinned_nor_counted_as_a_finish() -> None:
    r, _ = retention(policy(cold_start_ttl_s=10.0))
    r.arrive("a", tags.Tags("P", "t", None), now=0.0)
    assert r.finish("a", FAILED, 32, now=1.0) == 0.0
    entry = r.book.get("P")
    assert entry is not None and entry.last_finish is None


def test_a_pinned_call_records_its_ttl_for_the_engine_log() -> None:
    r, _ = retention(policy(cold_start_ttl_s=2.5))
    r.arrive("a", tags.Tags("P", "t", None), now=0.0)
    assert r.live["a"].ttl_s == 0.0
    assert r.pin("a", [1], r.finish("a", OK, 32, now=1.0), now=1.0)
    assert r.live["a"].ttl_s == 2.5


def test_the_program_book_forgets_after_the_policys_abandon_s() -> None:
    """The book's idle limit is the policy's ``abandon_s``: a program idle longer is a new
    program when it comes back (its first arrival is the new call's)."""
    r, _ = retention(policy(cold_start_ttl_s=2.0, abandon_s=600.0))
    assert r.book.idle_s == 600.0
    r.arrive("a", tags.Tags("P", "t", None), now=0.0)
    r.finish("a", OK, 32, now=1.0)
    r.forget("a")
    assert r.arrive("b", tags.Tags("P", "t", None), now=700.0).program_start == 700.0


def test_the_program_book_drops_the_least_recently_seen_and_keeps_idle_s_itself() -> None:
    book = ProgramBook(cap=2, idle_s=60.0)
    book.arrive("A", now=0.0)
    book.arrive("B", now=1.0)
    book.arrive("A", now=2.0)  # A seen again: B is now the least recently seen
    book.arrive("C", now=3.0)  # one program too many: B makes room as C arrives
    assert len(book) == 2 and book.dropped == 1
    assert "A" in book and "B" not in book and "C" in book
    # idle for exactly idle_s is not idle *longer* than it
    book.prune(now=62.0)
    assert "A" in book


def test_a_stalled_engine_releases_the_heads_own_pin_when_it_is_the_only_one() -> None:
    """Nothing running, and the only pin is the queue head's program's: it goes (last,
    and here first), or the engine waits forever."""
    for valve in ("head", "stall-only"):
        r, _ = retention(policy(cold_start_ttl_s=10.0, valve=valve))
        r.arrive("h", tags.Tags("head", None, None), now=0.0)
        r.pin("h", [0], r.finish("h", OK, 32, now=0.0), now=0.0)
        assert list(r.valve_order("head", stalled=True)) == ["head"]
        assert list(r.valve_order("head", stalled=False)) == []


def test_the_queue_key_breaks_a_tie_in_program_start_by_the_programs_first_arrival() -> None:
    """Two programs started at the same instant: their calls go in the order the programs
    first arrived, whatever order the calls themselves arrived in."""
    r, _ = retention(policy(cold_start_ttl_s=10.0))
    for name in ("zeta", "alpha"):  # zeta's program arrives first
        r.arrive(name, tags.Tags(name, None, None), now=0.0)
        r.finish(name, OK, 32, now=0.0)  # no pin
        r.forget(name)
    alpha = r.arrive("alpha-1", tags.Tags("alpha", None, None), now=1.0)
    zeta = r.arrive("zeta-1", tags.Tags("zeta", None, None), now=1.0)
    assert r.key(zeta, preempted=False) < r.key(alpha, preempted=False)


def test_the_policy_source_asks_for_the_calls_tool_and_prices_a_miss_as_a_reload() -> None:
    """τ comes from the call's tool's CDF (more than K of its own), and a source for an
    engine with an offload tier prices a miss as a reload (here a tenth of a prefill)."""
    fast = Prior((0.2,), (1.0,), 500)
    slow = Prior((30.0,), (1.0,), 1000)
    pol = TTLPolicy.create(
        PolicyParams(k=10),
        lambda tokens, offload: tokens / 1e6 / (10 if offload else 1),
        {"fast": fast},
        slow,
    )
    for offload, want in ((False, 0.2), (True, 0.0)):  # B = 1 s, then 0.1 s
        r = Retention(PolicySource(pol, offload=offload), free=lambda b: None, capacity_blocks=100)
        r.arrive("a", tags.Tags("P", "fast", None), now=0.0)
        assert r.finish("a", OK, 1_000_000, now=0.0) == want


def test_a_pin_is_due_at_its_expiry_and_the_heap_stays_bounded_around_a_parked_pin() -> None:
    """A pin is due at ``now == expiry``; releases compact the lazy heap to at most
    2·pins + 64 entries, and a parked pin stays off it (then expires once unparked)."""
    table = PinTable(free=lambda blocks: None)
    table.add(Pin("x", [0], expiry=5.0, created=0.0, program_start=0.0, ttl_s=5.0))
    assert not table.any_due(4.999) and table.any_due(5.0)
    r, _ = retention(policy(cold_start_ttl_s=10.0))
    for i in range(200):
        r.arrive(f"r{i}", tags.Tags(f"p{i}", "t", None), now=0.0)
        r.pin(f"r{i}", [0], r.finish(f"r{i}", OK, 32, now=0.0), now=0.0)
        r.forget(f"r{i}")
    parked = r.pins.get("p0")
    assert parked is not None
    r.pins.park(parked)  # its call arrived (the simulator parks at once)
    for i in range(1, 151):
        r.release(f"p{i}", "hit")
    r.check()
    assert len(r.pins) == 50 and len(r.pins._heap) <= 2 * 50 + 64
    r.unpark("p0")
    assert r.expire(now=11.0, waiting=lambda program: False) == 50
    assert not r.pins
    r.check()


def test_the_program_queue_says_when_a_programs_last_waiting_call_leaves() -> None:
    """The queue calls ``on_empty`` once a program has no call waiting (however the call
    left: one by one or in a batch), which unparks the program's pin."""
    pytest.importorskip("vllm")
    from ttlctl.engine.queue import ProgramQueue

    @dataclass(eq=False)
    class Req:
        program: str

    emptied: list[str] = []
    q = ProgramQueue(lambda r: (0.0,), lambda r: r.program, on_empty=emptied.append)  # type: ignore[attr-defined]
    a, b, c = Req("P"), Req("P"), Req("Q")
    for r in (a, b, c):
        q.add_request(r)  # type: ignore[arg-type]
    q.remove_request(a)  # type: ignore[arg-type]
    assert emptied == [] and q.has_program("P")
    q.remove_requests([b, c])  # type: ignore[list-item]
    assert sorted(emptied) == ["P", "Q"] and not q.has_program("P")
