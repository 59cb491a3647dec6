"""ttlctl/server/vllm_options.py: which vLLM option one argument sets, as vLLM's parser
reads it (that vLLM's own parser agrees: test_vllm_parser.py)."""

from __future__ import annotations

from ttlctl.server.vllm_options import gathered, option_name, option_set, shown, written

TP = ("--tensor-parallel-size", "-tp")


def test_an_option_is_named_as_vllm_reads_it() -> None:
    assert option_name("--max_num_seqs=4") == "--max-num-seqs"
    assert option_name("-tp") == "-tp" and option_name("-tp=2") == "-tp"
    # underscores are dashes up to the first dot: a dotted key is the option's JSON value
    assert option_name("--compilation_config.cudagraph_mode") == (
        "--compilation-config.cudagraph_mode"
    )
    assert written("--compilation_config.cudagraph_mode=1") == "--compilation-config"
    assert option_name("model-dir") == "model-dir"


def test_an_argument_sets_an_option_by_its_name_or_a_prefix_of_it() -> None:
    for arg in ("--tensor-parallel-size", "--tensor_parallel_size=2"):
        assert option_set(arg, TP) == "--tensor-parallel-size"
    assert option_set("-tp", TP) == option_set("-tp=2", TP) == "-tp"
    # argparse's abbreviations, in every form vLLM's parser takes
    assert option_set("--tensor-par", TP) == "--tensor-parallel-size"
    assert option_set("--tensor_par=3", TP) == "--tensor-parallel-size"
    assert option_set("--tensor-par.x", TP) == "--tensor-parallel-size"
    assert option_set("-t", TP) == "-tp"
    # a short name is abbreviated alone only: `-t=2` is no option to argparse
    assert option_set("-t=2", TP) is None and option_set("-tp=2", TP) == "-tp"
    # not one of them: another option, a longer name, a value, the end of the options
    for arg in ("--tensor-parallel-size-x", "--dtype", "-tpx", "2", "x.yaml", "-", "--", ""):
        assert option_set(arg, TP) is None, arg
    assert option_set("--no-async-sch", ("--async-scheduling", "--no-async-scheduling")) == (
        "--no-async-scheduling"
    )
    assert option_set("--async-sch", ("--async-scheduling", "--no-async-scheduling")) == (
        "--async-scheduling"
    )


def test_a_message_says_what_an_abbreviation_stands_for() -> None:
    assert shown("--scheduler_cls=x", "--scheduler-cls") == "--scheduler-cls"
    assert shown("--scheduler-c", "--scheduler-cls") == (
        "--scheduler-c (abbreviates --scheduler-cls)"
    )
    assert shown("-t", "-tp") == "-t (abbreviates -tp)"


def test_dotted_options_are_gathered_into_one_json_value_after_the_others() -> None:
    """vLLM's `--x.key value`: the next argument is the value whatever it is (here `-tp`,
    not an option), and the keys of one option become one JSON object, given last."""
    args = ["--hf_overrides.a", "-tp", "-dp", "2", "--hf-overrides.b.c=1", "--x.l+", "p,q"]
    assert gathered(args) == [
        "-dp", "2",
        "--hf-overrides", '{"a": "-tp", "b": {"c": 1}}',
        "--x", '{"l": ["p", "q"]}',
    ]  # fmt: skip
    assert [option_set(a, TP) for a in gathered(args)] == [None] * 6
    # not dotted: a dot in a value only, or no value to take
    assert gathered(["--max_num_seqs=1.5", "--y.z"]) == ["--max-num-seqs=1.5", "--y.z"]
