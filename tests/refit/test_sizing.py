"""replay/refit_sizing.py: the replayed engine's size from the flags, the log's facts, the
bundle's record or the defaults, and what is said about it."""

from __future__ import annotations

from typing import Any

from replay.refit_sizing import SIZE_FLAGS, by_replica, size
from replay.scheduler import SimSchedulerConfig

NONE: dict[str, int | None] = dict.fromkeys(SIZE_FLAGS)


def facts(replica: str | None, kv_tokens: int, calls: int = 1, **more: Any) -> dict[str, Any]:
    doc = {"replica": replica, "kv_tokens": kv_tokens, "block_size": 32, "max_num_seqs": 8,
           "max_num_batched_tokens": 2048, "max_model_len": 1024, "calls": calls}  # fmt: skip
    return doc | more


def test_the_log_sizes_what_no_flag_gives() -> None:
    sized = size(NONE | {"max_num_seqs": 4}, [facts(None, 4096)], SimSchedulerConfig(), "defaults")
    assert (sized.engine.kv_tokens, sized.engine.max_num_seqs, sized.engine.block_size) == (
        4096,
        4,
        32,
    )
    assert sized.from_log
    assert sized.notes == ("--max-num-seqs 4 disagrees with the log's engine (8): the flag wins",)
    assert sized.line.startswith("replay sized from the engine log: 4,096 KV tokens")
    assert sized.line.endswith("(flags given win)")


def test_a_flag_that_disagrees_is_reported_and_wins() -> None:
    sized = size(NONE | {"kv_tokens": 9000}, [facts("a", 4096)], SimSchedulerConfig(), "x", "a")
    assert sized.engine.kv_tokens == 9000
    assert sized.notes == (
        "--kv-tokens 9,000 disagrees with the log's engine (replica a) (4,096): the flag wins",
    )


def test_no_facts_names_the_flags_not_given() -> None:
    base = SimSchedulerConfig(kv_tokens=123_456)
    sized = size(NONE | {"block_size": 32}, [], base, "the bundle's tuning")
    assert sized.engine == SimSchedulerConfig(kv_tokens=123_456, block_size=32)
    assert not sized.from_log
    assert sized.line.startswith("replay engine (the flags given, else the bundle's tuning)")
    (note,) = sized.notes
    assert "--kv-tokens, --max-num-seqs, --max-num-batched-tokens, --max-model-len;" in note
    every = size(dict.fromkeys(SIZE_FLAGS, 64), [], base, "defaults")
    assert every.notes == () and every.line.startswith("replay engine as the flags give it")


def test_an_engine_that_changed_size_is_sized_as_the_one_that_served_most() -> None:
    sized = size(NONE, [facts(None, 4096, 3), facts(None, 8192, 9)], SimSchedulerConfig(), "d")
    assert sized.engine.kv_tokens == 8192
    assert sized.notes and "changed size (2 sizes)" in sized.notes[0]


def test_a_replica_that_changed_size_is_named_and_its_sizes_counted() -> None:
    """In a fleet's logs the note says which replica changed size; a new bundle at the same
    size (a second engine line) is not another size."""
    entries = [facts("r0", 4096, 3), facts("r0", 8192, 9), facts("r0", 8192, 2, bundle_sha256="b")]
    sized = size(NONE, entries, SimSchedulerConfig(), "d", "r0")
    assert sized.notes[0].startswith("the log's engine (replica r0) changed size (2 sizes)")


def test_async_scheduling_is_said() -> None:
    sized = size(NONE, [facts(None, 4096, async_scheduling=True)], SimSchedulerConfig(), "d")
    assert any("async scheduling" in n for n in sized.notes)


def test_one_engine_per_replica_in_the_order_named() -> None:
    engines = [facts("b", 4096), facts("a", 8192)]
    sized = by_replica(["a", "b", "c"], engines, NONE, SimSchedulerConfig(), "defaults")
    assert [s.replica for s in sized] == ["a", "b", "c"]
    assert [s.engine.kv_tokens for s in sized] == [8192, 4096, 600_000]
    assert sized[2].notes and "does not state" in sized[2].notes[0]


def test_each_replica_without_sizes_is_named() -> None:
    """Several replicas' older logs: each warning names its replica (not one line repeated)."""
    sized = by_replica(["a", "b"], [], NONE, SimSchedulerConfig(), "the defaults")
    assert [s.notes[0].split(" does not")[0] for s in sized] == [
        "the log (replica a)",
        "the log (replica b)",
    ]


def test_facts_without_sizes_are_not_called_the_flags() -> None:
    """An engine record that states no size (every size null) is no size: the line names
    the base the replay used, not flags nobody gave, and the note names the flags."""
    blank = dict.fromkeys(SIZE_FLAGS) | {"replica": None, "calls": 3}
    sized = size(NONE, [blank], SimSchedulerConfig(kv_tokens=77_000), "the defaults")
    assert sized.engine.kv_tokens == 77_000 and not sized.from_log
    assert sized.line.startswith("replay engine (the defaults): 77,000 KV tokens")
    (note,) = sized.notes
    assert "does not state its engine's size" in note and "--kv-tokens" in note
    # a log that states some sizes: the others are named, with where they came from
    part = facts(None, 4096) | {"max_model_len": None}
    some = size(NONE, [part], SimSchedulerConfig(), "the defaults")
    assert some.from_log and some.engine.kv_tokens == 4096
    assert some.notes == (
        "the log's engine does not state every size: the replay uses the defaults for "
        "--max-model-len; give them as the server had them",
    )


def test_every_size_given_is_the_flags_line_whatever_the_log_states() -> None:
    """The log sized the replay only where it gave a value the replay took: with every size
    given, the line is the flags' unless the log's watermark was taken; a watermark flag alone
    over the log's sizes says the flags win (the line shows the flag's); a size of 0 is none
    stated."""
    every = {k: v for k, v in zip(SIZE_FLAGS, (4096, 32, 8, 2048, 1024), strict=True)}
    flags = size(every, [facts(None, 8192)], SimSchedulerConfig(), "d")
    assert not flags.from_log and flags.line.startswith("replay engine as the flags give it")
    marked_log = size(every, [facts(None, 8192, watermark=0.05)], SimSchedulerConfig(), "d")
    assert marked_log.from_log and marked_log.engine.watermark == 0.05
    assert marked_log.line.startswith("replay sized from the engine log: ")
    marked = size(NONE | {"watermark": 0.1}, [facts(None, 8192)], SimSchedulerConfig(), "d")
    assert marked.engine.watermark == 0.1 and marked.line.endswith("(flags given win)")
    zero = size(NONE, [facts(None, 0)], SimSchedulerConfig(kv_tokens=77_000), "the defaults")
    assert zero.engine.kv_tokens == 77_000
    assert zero.notes[-1].endswith(
        "the replay uses the defaults for --kv-tokens; give them as the server had them"
    )
