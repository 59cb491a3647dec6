"""ttlctl reads vLLM's arguments as vLLM's own serve parser does: checked on that parser
(vLLM's ``FlexibleArgumentParser`` with ``make_arg_parser``, the one
``python -m vllm.entrypoints.openai.api_server`` builds), so these tests fail the day a
vLLM release reads them otherwise.

- Every option name ttlctl reads is one of vLLM's, and no vLLM option is a proper prefix
  of it: the reading of an abbreviation as the name it abbreviates
  (ttlctl/server/vllm_options.py) is sound only then, since argparse takes an exact name
  first.
- Every proper prefix of such a name is taken by vLLM's parser as that option or refused
  as ambiguous, never as another option.
- Arguments and config files parsed by vLLM set what ttlctl's checks read.
- A config file's options are written as vLLM's ``load_config_file`` writes them.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

import pytest
import yaml

from replay.validation.server_sources import SET_BY_MODEL, SIZED_BY_VALIDATE, server_base
from replay.validation.servers import OWN_FLAGS as VALIDATE_FLAGS
from replay.validation.validate_request import ValidateRequest
from ttlctl.errors import TtlctlError
from ttlctl.server import command, gpus, serving
from ttlctl.server.command import ASYNC_SCHEDULING, PROMPT_TOKENS_DETAILS, CommandError
from ttlctl.server.vllm_config import config_args, load, read
from ttlctl.server.vllm_options import gathered, option_set

#: every vLLM option name ttlctl reads in a server's arguments
READ_BY_TTLCTL = (
    *serving.OWN_FLAGS,
    *serving.DEFAULTED_FLAGS,
    *VALIDATE_FLAGS,
    *SIZED_BY_VALIDATE,
    *SET_BY_MODEL,
    *ASYNC_SCHEDULING,
    *(name for forms in gpus.PARALLEL_FLAGS for name in forms),
    *gpus.DATA_PARALLEL_FLAGS,
    PROMPT_TOKENS_DETAILS,
)


#: the names ttlctl reads in one list, each matched exactly before any abbreviation
NAMES_READ_TOGETHER = (SIZED_BY_VALIDATE,)


class Refused(Exception):
    """vLLM's parser refused the arguments (its ``error``, which would exit)."""


@pytest.fixture(scope="module")
def parser() -> Iterator[argparse.ArgumentParser]:
    """vLLM's serve parser, raising :class:`Refused` where it would print and exit."""
    pytest.importorskip("vllm", reason="vLLM's own parser is the reference (engine extra)")
    try:  # 0.33 and 0.34
        from vllm.entrypoints.common.cli_args import make_arg_parser
    except ImportError:  # 0.32
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    class Strict(FlexibleArgumentParser):  # type: ignore[misc]
        def error(self, message: str) -> NoReturn:
            raise Refused(message)

    yield make_arg_parser(Strict())


def _taken(parser: argparse.ArgumentParser, token: str) -> argparse.Action | str | None:
    """The option vLLM's parser takes ``token`` for, ``"ambiguous"`` where it refuses it,
    None where it is no option it knows."""
    try:
        found: Any = parser._parse_optional(token)  # argparse's own reading of one token
    except Refused:
        return "ambiguous"
    if isinstance(found, list):  # newer Pythons: one reading per action
        found = found[0]
    return None if found is None else found[0]


def test_no_vllm_option_is_a_proper_prefix_of_a_name_ttlctl_reads(
    parser: argparse.ArgumentParser,
) -> None:
    options = parser._option_string_actions
    for name in READ_BY_TTLCTL:
        assert name in options, f"{name} is no longer an option of vLLM's serve parser"
        # a shorter name read beside it, in the same list, is matched exactly first
        # (option_set), as vLLM does; a list ttlctl reads a name in alone could not
        beside = next((group for group in NAMES_READ_TOGETHER if name in group), ())
        shorter = [o for o in options if name.startswith(o) and o != name and o not in beside]
        assert shorter == [], f"{shorter} would be taken exactly where ttlctl reads {name}"


def test_vllm_takes_each_prefix_of_a_name_as_that_option_or_refuses_it(
    parser: argparse.ArgumentParser,
) -> None:
    """argparse's ``allow_abbrev``, on in vLLM's parser: what ttlctl reads as the name
    (``option_set``) vLLM takes as that option, or refuses itself as ambiguous."""
    resolved: set[str] = set()
    for name in READ_BY_TTLCTL:
        action = parser._option_string_actions[name]
        start = 3 if name.startswith("--") else 2
        for end in range(start, len(name)):
            prefix = name[:end]
            beside = next((group for group in NAMES_READ_TOGETHER if name in group), ())
            if prefix in beside:  # a name read in the same list: matched exactly
                assert option_set(prefix, beside) == prefix
                assert _taken(parser, prefix) is parser._option_string_actions[prefix]
                continue
            forms = (prefix, f"{prefix}=1") if name.startswith("--") else (prefix,)
            for token in forms:
                taken = _taken(parser, token)
                assert taken is action or taken == "ambiguous", (token, name, taken)
                assert option_set(token, (name,)) == name
                if taken is action:
                    resolved.add(token)
            if not name.startswith("--"):  # `-t=2`: no option to vLLM (unrecognized)
                assert _taken(parser, f"{prefix}=1") is None, (prefix, name)
                assert option_set(f"{prefix}=1", (name,)) is None, (prefix, name)
        if not name.startswith("--"):
            assert _taken(parser, f"{name}=1") is action and option_set(f"{name}=1", (name,))
    # the abbreviations this change is about are real ones
    for token in ("--scheduler-c", "--tensor-par=1", "--no-async-sch", "--max-num-se", "-t"):
        assert token in resolved, token


def test_a_short_name_shortened_with_a_value_is_no_option_as_vllm_refuses_it(
    parser: argparse.ArgumentParser,
) -> None:
    """`-t=2` (`-d=2`): vLLM refuses it as an unrecognized argument (argparse abbreviates
    a short name given alone only), so it is no size of ttlctl's either. Regression: ttlctl
    read it as `-tp 2` (a server sized 2 GPUs that vLLM would not start)."""
    for args in (["-t=2"], ["-d=2"], ["-p=2"], ["-pc=2"]):
        with pytest.raises(Refused, match="unrecognized arguments"):
            _parsed(parser, args)
        assert gpus.parallel_size(args) == 1, args
        gpus.check_one_engine(args)
    assert gpus.parallel_size(["-tp=2", "-pp=3"]) == _world(_parsed(parser, ["-tp=2", "-pp=3"]))


def test_dotted_options_are_gathered_as_vllm_gathers_them() -> None:
    """vLLM's parser takes each dotted option out with the argument after it (its value,
    whatever it is) and gives the keys of each option as one JSON object after the other
    arguments; ttlctl reads the arguments so gathered (vllm_options.gathered)."""
    pytest.importorskip("vllm", reason="vLLM's own parser is the reference (engine extra)")
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    class Recorder(argparse.ArgumentParser):
        def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
            return list(args)

    class Gathering(FlexibleArgumentParser, Recorder):  # type: ignore[misc]
        """vLLM's parser up to the arguments it hands to argparse."""

    for args in [
        ["--host.a", "b", "--port", "1"],
        ["--hf-overrides.a", "-tp", "-dp", "2"],
        ["--hf_overrides.a_b=1", "--hf-overrides.c.d", '{"e": 1}', "--hf-overrides.c.f", "x"],
        ["--x.l+", "a,b", "--x.l+=c", "--x.l", "[1]", "--max_num_seqs=1.5", "-tp.k", "2"],
        ["--speculative-config.model", "--scheduler_cls", "--tensor_parallel_size", "2"],
    ]:
        assert Gathering().parse_args(args) == gathered(args), args


def test_a_size_set_by_dotted_keys_is_no_number_as_vllm_refuses_it(
    parser: argparse.ArgumentParser,
) -> None:
    """`--tensor-parallel-size.x 2` sets the option to the object {"x": 2}: vLLM refuses it,
    and so does ttlctl, where it read 2."""
    for args in (["--tensor-parallel-size.x", "2"], ["-dp.x", "2"]):
        with pytest.raises(Refused, match="invalid int value"):
            _parsed(parser, args)
        with pytest.raises(CommandError, match=r"takes a number, not '\{\"x\": 2\}'"):
            gpus.check_parallel(args, 1)


def _world(ns: argparse.Namespace) -> int:
    return ns.tensor_parallel_size * ns.pipeline_parallel_size * ns.prefill_context_parallel_size


def _parsed(parser: argparse.ArgumentParser, args: Sequence[str]) -> argparse.Namespace:
    return parser.parse_args(["--model", "m", *args])


CASES: list[tuple[dict[str, Any] | None, list[str]]] = [
    (None, ["--tensor-par", "3"]),
    (None, ["--tensor_par=2", "--pipeline-p", "2", "--dtype", "half"]),
    (None, ["-t", "2", "-pcp", "2"]),
    (None, ["--prefill-context-par=2", "-dp", "2"]),
    (None, ["--scheduler-c", "foo.Bar", "--no-async-sch", "--max-num-se", "7"]),
    (None, ["--async_scheduling", "--max_num_batched_tok=64"]),
    ({"tensor-parallel-size": 4}, ["-tp", "2"]),  # the command line wins over the file
    ({"tensor_parallel_size": 2, "pipeline-par": 2}, []),
    ({"data_parallel_size": 2, "scheduler_cls": "foo.Bar"}, []),
    ({"async-scheduling": False, "max-num-seqs": 4}, []),
    ({"async_scheduling": False, "enforce-eager": True}, []),  # vLLM writes no --no-async_…
    ({"async-sch": False}, []),  # nor --no-async-sch: not an option of its own
    ({"async-sch": True, "enable-prompt-tokens-details": True}, []),
    ({"max_num_batched": 64, "hf-overrides": {"x": 1}}, ["--dtype", "half"]),
    ({"dtype": "half"}, ["--port", "9000"]),
    # a dotted option takes the next argument as its value, whatever it is
    (None, ["--hf-overrides.a", "-dp", "-tp", "2"]),
    (None, ["--hf-overrides.a", "--scheduler-cls", "--port", "9000"]),
    (None, ["--hf_overrides.a=1", "--hf-overrides.b+", "x,y", "--host.a", "b"]),
    ({"hf-overrides": {"x": 1}}, ["--hf-overrides.y", "-tp", "-pp", "2"]),
]


def _sets(check: Any, *args: Any) -> bool:
    try:
        check(*args)
    except CommandError:
        return True
    return False


@pytest.mark.parametrize(("config", "args"), CASES)
def test_vllm_sets_what_ttlctl_reads(
    parser: argparse.ArgumentParser,
    tmp_path: Path,
    config: dict[str, Any] | None,
    args: list[str],
) -> None:
    given = list(args)
    if config is not None:
        path = tmp_path / "c.yaml"
        path.write_text(yaml.safe_dump(config))
        given = ["--config", str(path), *args]
    ns = _parsed(parser, given)
    defaults = _parsed(parser, [])
    world = ns.tensor_parallel_size * ns.pipeline_parallel_size * ns.prefill_context_parallel_size
    assert gpus.parallel_size(given) == world
    assert _sets(gpus.check_one_engine, given) == (ns.data_parallel_size != 1)
    # behind a wrapper whose one-letter flags vLLM never sees (docker's -t, -d, -p): its
    # vLLM part after vLLM's entry, or the whole less one-letter flags (vLLM's -t unread)
    for wrapper in (["srun", "-t", "5", "-p", "gpu", "vllm", "serve"], ["docker", "run", "-t",
                    "-d", "-p", "8000:8000", "img"], ["docker", "run", "-dp", "8000:8000",
                    "-tp", "1:1", "--gpus", "all", "img"]):  # fmt: skip
        vllm_part = command.vllm_arguments([*wrapper, *given])
        if wrapper[0] == "srun" or "-t" not in given:
            assert gpus.parallel_size(vllm_part) == world, wrapper
            assert _sets(gpus.check_one_engine, vllm_part) == (ns.data_parallel_size != 1)
    for own, dest in [
        (("--scheduler-cls",), "scheduler_cls"),
        (ASYNC_SCHEDULING, "async_scheduling"),
        (("--max-num-seqs",), "max_num_seqs"),
        (("--max-num-batched-tokens",), "max_num_batched_tokens"),
        (("--port",), "port"),
        (("--host",), "host"),
    ]:
        vllm_sets = getattr(ns, dest) != getattr(defaults, dest)
        assert _sets(command.refuse, given, own, "me", "there") == vllm_sets, dest
    assert read(given, ()).sets(PROMPT_TOKENS_DETAILS) == ns.enable_prompt_tokens_details


YAMLS = {
    "flat": "port: 12323\ntensor-parallel-size: 4\nmodel: x\n",
    "underscores": "tensor_parallel_size: 2\nmax_num_seqs: 8\nscheduler_cls: a.B\n",
    "booleans": (
        "enforce-eager: true\nasync-scheduling: false\nasync_scheduling: false\n"
        "enable-chunked-prefill: false\nheadless: false\nasync-sch: false\n"
    ),
    "nested": (
        "compilation-config:\n  pass_config:\n    fuse_allreduce_rms: true\n"
        "speculative-config:\n  model: x\n  num_speculative_tokens: 3\n"
    ),
    "lists and others": (
        "served-model-name: [a, b]\nmiddleware: []\ngpu-memory-utilization: 0.5\n"
        "seed: null\nmax-model-len: 8k\nhf-overrides: {}\n"
    ),
}


@pytest.mark.parametrize("name", sorted(YAMLS))
def test_a_config_file_is_read_as_vllm_reads_it(
    parser: argparse.ArgumentParser, tmp_path: Path, name: str
) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(YAMLS[name])
    vllm = parser.load_config_file(str(path))  # type: ignore[attr-defined]
    assert config_args(load(str(path)), set(parser._option_string_actions), str(path)) == vllm


def test_vllm_reads_no_file_for_config_equals(
    parser: argparse.ArgumentParser, tmp_path: Path
) -> None:
    """Why ``--config=FILE`` is refused (vllm_config.read): vLLM 0.32 sets an option for
    it that nothing reads, so the file's options are dropped without a word."""
    path = tmp_path / "c.yaml"
    path.write_text("tensor-parallel-size: 2\n")
    assert _parsed(parser, ["--config", str(path)]).tensor_parallel_size == 2
    assert _parsed(parser, [f"--config={path}"]).tensor_parallel_size == 1


@pytest.mark.parametrize(
    ("config", "args"),
    [
        (None, ["--model", "other"]),
        (None, ["--model=other", "-tp", "1"]),
        (None, ["--mod", "other"]),  # vLLM: ambiguous
        ({"model": "other"}, []),  # the command line's --model MODEL wins over the file's
        (None, ["--served-model-name", "other"]),
    ],
)
def test_validate_serves_its_model_or_refuses(
    parser: argparse.ArgumentParser,
    tmp_path: Path,
    config: dict[str, Any] | None,
    args: list[str],
) -> None:
    """``validate --model MODEL -- ARGS``: the server vLLM starts from validate's command
    serves MODEL (whose config.json validate reads as the served model's), or validate
    refuses ARGS before any server starts."""
    given = list(args)
    if config is not None:
        path = tmp_path / "c.yaml"
        path.write_text(yaml.safe_dump(config))
        given = ["--config", str(path), *args]
    model = str(tmp_path / "model")
    try:
        base, _ = server_base(ValidateRequest(model=model, extra=given))
    except TtlctlError:
        return
    assert base is not None
    try:
        ns = parser.parse_args(base[base.index(command.SERVER_MODULE) + 1 :])
    except Refused:
        return
    assert ns.model == model
