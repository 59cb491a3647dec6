"""replay/engine_settings.py: a logged engine's scheduler settings that no replay models are
said, one line each; its running batch's cap (``max_num_active_seqs``) and its prefill chunk
cap (``long_prefill_token_threshold``) size the replay."""

from __future__ import annotations

from typing import Any

import pytest

from replay.engine_settings import UNMODELLED, notes
from replay.logged_settings import admitted
from replay.refit_sizing import SIZE_FLAGS, size
from replay.scheduler import SimSchedulerConfig
from ttlctl.errors import ConfigError

NONE: dict[str, int | None] = dict.fromkeys(SIZE_FLAGS)


def facts(calls: int = 1, **more: Any) -> dict[str, Any]:
    doc = {"replica": None, "kv_tokens": 4096, "block_size": 32, "max_num_seqs": 8,
           "max_num_batched_tokens": 2048, "max_model_len": 1024, "calls": calls,
           "bundle_sha256": None}  # fmt: skip
    return doc | more


#: each setting at vLLM's default, as the plugin states it on vLLM 0.34
DEFAULTS: dict[str, Any] = {
    "scheduling_policy": "fcfs",
    "max_num_active_seqs": None,
    "max_num_queued_reqs": None,
    "long_prefill_token_threshold": 0,
    "prefill_schedule_interval": 1,
    "cache_aware_admission_window": 0,
    "cache_aware_admission_threshold": 0.5,
    "max_num_inflight_kv_loads": None,
    "kv_connector": None,
    "scheduler_reserve_full_isl": True,
    "enable_chunked_prefill": True,
    "max_num_scheduled_tokens": None,
    "watermark": 0.0,
    "max_num_queued_tokens": None,
}

#: a value other than the default for each setting no replay models, and its flag
ODD: dict[str, tuple[Any, str]] = {
    "scheduling_policy": ("priority", "--scheduling-policy priority"),
    "max_num_queued_reqs": (64, "--max-num-queued-reqs 64"),
    "prefill_schedule_interval": (4, "--prefill-schedule-interval 4"),
    "cache_aware_admission_window": (16, "--cache-aware-admission-window 16"),
    "max_num_inflight_kv_loads": (2, "--max-num-inflight-kv-loads 2"),
    "kv_connector": ("NixlConnector", "--kv-transfer-config NixlConnector"),
    "enable_chunked_prefill": (False, "--no-enable-chunked-prefill"),
    "max_num_scheduled_tokens": (1024, "--max-num-scheduled-tokens 1024"),
    "max_num_queued_tokens": (100_000, "--max-num-queued-tokens 100000"),
}


def test_every_unmodelled_setting_has_an_odd_value_here() -> None:
    assert {s.fact for s in UNMODELLED} == set(ODD)


def test_the_defaults_and_an_older_plugins_facts_say_nothing() -> None:
    assert notes([facts(**DEFAULTS)], "the log's engine") == []
    assert notes([facts()], "the log's engine") == []  # no such facts: null, the default
    sized = size(NONE, [facts(**DEFAULTS)], SimSchedulerConfig(), "defaults")
    assert sized.notes == () and sized.engine.max_num_seqs == 8


@pytest.mark.parametrize("fact", sorted(ODD))
def test_a_setting_off_its_default_is_said_once_by_its_flag(fact: str) -> None:
    value, flag = ODD[fact]
    entries = [facts(**DEFAULTS), facts(**(DEFAULTS | {fact: value}))]
    sized = size(NONE, entries, SimSchedulerConfig(), "defaults", "r1")
    said = [n for n in sized.notes if "does not model" in n]
    assert said == [n for n in notes(entries, "the log's engine (replica r1)")]
    (line,) = said
    assert line.startswith(f"the log's engine (replica r1) ran {flag}, which the simulator")


def test_two_values_of_one_setting_are_both_named() -> None:
    entries = [facts(prefill_schedule_interval=2), facts(prefill_schedule_interval=4)]
    (line,) = notes(entries, "E")
    assert line.startswith("E ran --prefill-schedule-interval 2, 4,")


@pytest.mark.parametrize("adaptive", [False, True, None])
def test_the_logs_prefill_cap_is_replayed_and_shown(adaptive: bool | None) -> None:
    """The simulators apply vLLM's prefill chunk cap: the log's is the replay's (the busiest
    engine's), said in the engine's line; none stated (an older plugin) is no cap."""
    logged = facts(long_prefill_token_threshold=512, long_prefill_token_threshold_adaptive=adaptive)
    sized = size(NONE, [logged], SimSchedulerConfig(), "defaults")
    assert sized.engine.long_prefill_token_threshold == 512
    assert sized.engine.long_prefill_token_threshold_adaptive is (adaptive is True)
    shown = "long_prefill_token_threshold 512" + (" (adaptive)" if adaptive else "")
    assert sized.line.endswith(shown) and not [n for n in sized.notes if "prefill" in n]
    plain = size(NONE, [facts()], SimSchedulerConfig(), "defaults")
    assert plain.engine.long_prefill_token_threshold == 0 and "long_prefill" not in plain.line
    # past a smaller --max-model-len given: no prompt is longer, so no cap is lost
    short = size(NONE | {"max_model_len": 256}, [logged], SimSchedulerConfig(), "defaults")
    assert short.engine.long_prefill_token_threshold == 256
    assert (
        "the log's engine capped prefills at 512 tokens, past the replay's max_model_len: "
        "replayed at 256 (no prompt is longer)"
    ) in short.notes


def test_the_logs_watermark_is_replayed_and_shown() -> None:
    """The simulators keep vLLM's watermark free at admission: the log's is the replay's,
    said in the engine's line (with the blocks it keeps: a 5% of 128 blocks + vLLM's null
    block); none stated, or a value vLLM refuses, is none; a restart with another is
    another size."""
    sized = size(NONE, [facts(watermark=0.05)], SimSchedulerConfig(), "defaults")
    assert sized.engine.watermark == 0.05 and sized.engine.watermark_blocks == 6
    assert sized.line.endswith("watermark 0.05 (6 blocks kept free)")
    assert not [n for n in sized.notes if "watermark" in n]
    for plain in (facts(), facts(watermark=1.5), facts(watermark=1.0), facts(watermark=True)):
        sized = size(NONE, [plain], SimSchedulerConfig(), "defaults")
        assert sized.engine.watermark == 0.0 and "watermark" not in sized.line
        # a number vLLM would refuse (an edited log) is said; none stated is not
        refused = [n for n in sized.notes if "watermark" in n]
        stated = plain.get("watermark")
        if isinstance(stated, float):
            assert refused == [
                f"the log's engine states watermark {stated:g}, which vLLM refuses: "
                "replayed without one"
            ]
        else:
            assert refused == []
    entries = [facts(3, watermark=0.0), facts(9, watermark=0.1)]
    sized = size(NONE, entries, SimSchedulerConfig(), "d")
    assert sized.engine.watermark == 0.1
    assert "changed its prefill cap, reservation or watermark (2 settings)" in sized.notes[0]


def test_an_engine_that_changed_its_prefill_cap_is_said_so() -> None:
    """A restart with only another cap is another engine to replay, said as a change of
    its settings, not of its size; with another size too, as a change of size."""
    entries = [facts(3, long_prefill_token_threshold=0), facts(9, long_prefill_token_threshold=64)]
    sized = size(NONE, entries, SimSchedulerConfig(), "d")
    assert sized.engine.long_prefill_token_threshold == 64
    assert sized.notes[0] == (
        "the log's engine changed its prefill cap, reservation or watermark (2 settings): "
        "sized as the one that served most calls (9)"
    )
    entries.append(facts(1, max_num_seqs=4, long_prefill_token_threshold=64))
    sized = size(NONE, entries, SimSchedulerConfig(), "d")
    assert "changed size (2 sizes)" in sized.notes[0]  # two sizes, whatever the settings


def test_cache_aware_admission_under_a_bundle_is_not_said() -> None:
    """The plugin's program queue undoes vLLM 0.34's reordering while a bundle is loaded, so
    an engine that had one replays as modelled; a stock engine (no bundle) did reorder."""
    window = {"cache_aware_admission_window": 16}
    assert notes([facts(**window, bundle_sha256="ab" * 32)], "E") == []
    (line,) = notes([facts(**window)], "E")
    assert "--cache-aware-admission-window 16" in line and "arrival order" in line


@pytest.mark.parametrize(("active", "cap"), [(None, 8), (4, 4), (8, 8), (16, 8), (0, 8), (True, 8)])
def test_the_running_batchs_cap_is_max_num_active_seqs_below_max_num_seqs(
    active: Any, cap: int
) -> None:
    """vLLM admits into the running batch up to ``max_num_active_seqs`` where it is set
    (``--max-num-seqs`` then sizes only the model runner): the simulator's max_num_seqs."""
    assert admitted(facts(max_num_active_seqs=active)) == cap
    sized = size(NONE, [facts(max_num_active_seqs=active)], SimSchedulerConfig(), "d")
    assert sized.engine.max_num_seqs == cap
    said = [n for n in sized.notes if "--max-num-active-seqs" in n]
    assert bool(said) == (cap != 8)
    if said:
        assert said[0].startswith(f"the log's engine admitted at most {cap} requests")


def test_a_flag_given_is_compared_with_the_running_batchs_cap() -> None:
    sized = size(
        NONE | {"max_num_seqs": 4}, [facts(max_num_active_seqs=4)], SimSchedulerConfig(), "d"
    )
    assert sized.engine.max_num_seqs == 4
    assert not [n for n in sized.notes if "max-num" in n]
    assert admitted({"max_num_seqs": None, "max_num_active_seqs": 4}) is None


def test_an_engine_that_changed_its_cap_changed_size() -> None:
    entries = [facts(3), facts(9, max_num_active_seqs=2)]
    sized = size(NONE, entries, SimSchedulerConfig(), "d")
    assert sized.engine.max_num_seqs == 2 and "changed size (2 sizes)" in sized.notes[0]


def test_a_flag_given_wins_over_the_logs_prefill_cap_and_is_noted() -> None:
    logged = facts(long_prefill_token_threshold=512, long_prefill_token_threshold_adaptive=True)
    given = NONE | {"long_prefill_token_threshold": 128}
    sized = size(given, [logged], SimSchedulerConfig(), "defaults")
    assert sized.engine.long_prefill_token_threshold == 128
    assert sized.engine.long_prefill_token_threshold_adaptive is True  # the log's: not given
    assert sized.notes == (
        "--long-prefill-token-threshold 128 disagrees with the log's engine (512): the flag wins",
    )
    off = given | {"long_prefill_token_threshold_adaptive": False}
    sized = size(off, [logged], SimSchedulerConfig(), "defaults")
    assert sized.engine.long_prefill_token_threshold_adaptive is False
    assert sized.notes[-1] == (
        "--long-prefill-token-threshold-adaptive off disagrees with the log's engine (on): "
        "the flag wins"
    )
    # the switch alone: the log's threshold, floored adaptively as the flag asks
    switch = NONE | {"long_prefill_token_threshold_adaptive": True}
    plain = facts(long_prefill_token_threshold=512)
    sized = size(switch, [plain], SimSchedulerConfig(), "defaults")
    assert sized.engine.long_prefill_token_threshold == 512
    assert sized.engine.long_prefill_token_threshold_adaptive is True
    # no log: the flag's, else the base's (a bundle's record)
    base = SimSchedulerConfig(long_prefill_token_threshold=64)
    assert size(NONE, [], base, "the bundle").engine.long_prefill_token_threshold == 64
    over = size(given, [], base, "the bundle")
    assert over.engine.long_prefill_token_threshold == 128


def test_a_recorded_prefill_cap_past_a_shorter_logged_model_is_cut_not_refused() -> None:
    """The bundle's record (the base) capped prefills at 2,048 on a long model; the log's
    engine serves a 1,024-token model and states no cap (an older plugin) or none (0): the
    record's cap is cut to the model's length (it caps no prompt either way), or replaced by
    the log's, where the sizing stopped on '--long-prefill-token-threshold must be from 0
    (no cap) to --max-model-len (1,024), not 2,048', a flag nobody gave."""
    base = SimSchedulerConfig(max_model_len=32_768, long_prefill_token_threshold=2048)
    older = size(NONE, [facts()], base, "the bundle's last refit")
    assert older.engine.max_model_len == 1024
    assert older.engine.long_prefill_token_threshold == 1024
    off = size(NONE, [facts(long_prefill_token_threshold=0)], base, "the bundle's last refit")
    assert off.engine.long_prefill_token_threshold == 0
    # a flag's threshold past the model's length is still refused, naming the flags
    with pytest.raises(ConfigError, match=r"^--long-prefill-token-threshold must be from 0"):
        size(NONE | {"long_prefill_token_threshold": 2048}, [facts()], base, "b")


def test_a_shorter_max_model_len_given_cuts_the_recorded_prefill_cap() -> None:
    """``resized``: a size given over a record keeps the record's cap only as far as the
    new length (a flag's own threshold is checked as given)."""
    base = SimSchedulerConfig(max_model_len=32_768, long_prefill_token_threshold=2048)
    assert base.resized(max_model_len=1024).long_prefill_token_threshold == 1024
    assert base.resized(max_model_len=4096).long_prefill_token_threshold == 2048
    assert base.resized(kv_tokens=9_000).long_prefill_token_threshold == 2048
    with pytest.raises(ConfigError, match=r"--max-model-len \(1,024\), not 2,048$"):
        base.resized(max_model_len=1024, long_prefill_token_threshold=2048)


def test_the_max_num_scheduled_tokens_equal_to_the_budget_is_the_default() -> None:
    same = facts(max_num_scheduled_tokens=2048)  # the record's max_num_batched_tokens
    assert notes([same], "E") == []


@pytest.mark.parametrize("reserve", [True, False, None])
def test_the_logs_whole_prompt_reservation_is_replayed(reserve: bool | None) -> None:
    """vLLM's --scheduler-reserve-full-isl (on by default): with it off, admission asks room
    for a prompt's first chunk only, which the simulators model (``reserve_full_prompt``)."""
    sized = size(NONE, [facts(scheduler_reserve_full_isl=reserve)], SimSchedulerConfig(), "d")
    assert sized.engine.reserve_full_prompt is (reserve is not False)
    assert ("no whole-prompt reservation" in sized.line) is (reserve is False)
    restarted = [
        facts(3, scheduler_reserve_full_isl=True),
        facts(9, scheduler_reserve_full_isl=False),
    ]
    sized = size(NONE, restarted, SimSchedulerConfig(), "d")
    assert "changed its prefill cap, reservation or watermark" in sized.notes[0]
    assert not sized.engine.reserve_full_prompt


def test_a_cap_only_the_log_gives_is_said_to_come_from_it() -> None:
    """Every size given by a flag, the prefill cap from the log: the line says the log sized
    the replay (flags given win), not that the flags did."""
    every = {k: v for k, v in zip(SIZE_FLAGS, (4096, 32, 8, 2048, 1024), strict=True)}
    sized = size(every, [facts(long_prefill_token_threshold=256)], SimSchedulerConfig(), "d")
    assert sized.line.startswith("replay sized from the engine log: ")
    assert sized.line.endswith("(flags given win)")


def test_a_prefill_cap_flag_over_a_logged_size_says_the_flags_win() -> None:
    """Every size from the log, the prefill cap from a flag: the line (which shows the flag's
    cap) says flags given win, where it read as if the log had stated that cap."""
    given = NONE | {"long_prefill_token_threshold": 128}
    sized = size(given, [facts()], SimSchedulerConfig(), "d")
    assert sized.line.startswith("replay sized from the engine log: ")
    assert sized.line.endswith("long_prefill_token_threshold 128 (flags given win)")
    assert not size(NONE, [facts()], SimSchedulerConfig(), "d").line.endswith("win)")
