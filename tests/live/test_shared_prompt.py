"""Live replay's prompts with shared prefixes: the same ids for the same keys in every
program, the program's own stream after them only while its keys stay the same."""

from __future__ import annotations

import threading

from replay.live.driver import LiveRun
from replay.workload import AgentProgram, Call, SharedPrefix
from tests.live.server_info import server_info

TOOLS = SharedPrefix((11, 12, 13), 16)  # 48 tokens: 3 blocks of the server's 16


def _run() -> LiveRun:
    info = server_info(
        url="http://x", max_model_len=4096, block_size=16, kv_tokens=10_000, num_gpu_blocks=625
    )
    return LiveRun(
        "http://x", info, list(range(100, 1100)), 0, "n", 10.0, 1e9, threading.Event(), None, 4
    )


def test_programs_with_the_same_prefix_send_the_same_leading_ids() -> None:
    run = _run()
    a = AgentProgram("a", 0.0, (Call(60, 4, 0, None, 0.0, TOOLS),))
    b = AgentProgram("b", 0.0, (Call(70, 4, 0, None, 0.0, TOOLS),))
    c = AgentProgram("c", 0.0, (Call(70, 4, 0, None, 0.0, SharedPrefix((11, 99), 16)),))
    pa, reused = run.prompt(a, 0, [], 60)
    assert reused == 0  # a first call repeats nothing, its last call's keys the same or not
    pb, _ = run.prompt(b, 0, [], 70)
    pc, _ = run.prompt(c, 0, [], 70)
    assert len(pa) == 60 and len(pb) == 70
    assert pa[:48] == pb[:48] and pa[48:] != pb[48:60]
    assert pc[:16] == pa[:16] and pc[16:32] != pa[16:32]  # the tree: one block in common


def test_own_stream_follows_only_the_same_keys() -> None:
    run = _run()
    calls = (
        Call(60, 4, 0, None, 0.0, TOOLS),
        Call(100, 4, 64, None, 0.0, TOOLS),  # repeats the first call's prompt and output
        Call(120, 4, 104, None, 0.0, SharedPrefix((11, 77), 16)),  # another prefix
        Call(130, 4, 124, None, 0.0),  # none
    )
    prog = AgentProgram("a", 0.0, calls)
    first, _ = run.prompt(prog, 0, [], 60)
    stream = [*first, 1, 2, 3, 4]
    second, own = run.prompt(prog, 1, stream, 100)  # own: what repeats the stream
    assert second[:64] == stream and own == 64
    stream = [*second, 5, 6, 7, 8]
    third, own = run.prompt(prog, 2, stream, 120)
    assert third[:16] == first[:16] and third[16:32] != first[16:32] and own == 0
    stream = [*third, 9, 9, 9, 9]
    fourth, own = run.prompt(prog, 3, stream, 130)
    assert own == 0 and fourth[:16] != first[:16]
    plain = AgentProgram("p", 0.0, (Call(10, 2, 0, None, 0.0), Call(20, 2, 12, None, 0.0)))
    p0, _ = run.prompt(plain, 0, [], 10)
    p1, own = run.prompt(plain, 1, [*p0, 1, 2], 20)
    assert p1[:12] == [*p0, 1, 2] and own == 12
