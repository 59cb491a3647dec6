"""A KV size that holds no KV block, refused in one line naming its flag (exit 2): before
any server starts where the arguments tell (replay.validation.sizing.check_kv_tokens,
replay.validation.kv_memory), else as soon as the first server answers, before its
warm-up and live run (replay.validation.sizing.kv_tokens_of)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

import pytest
from typer.testing import CliRunner

from profiles.models import PRESETS
from replay.validation.error import ValidateError
from replay.validation.kv_memory import check_kv_memory, memory_bytes
from replay.validation.servers import check_events_flag
from replay.validation.sizing import check_kv_tokens, given_block_size
from tests.http_stub import serving
from tests.live.servers import STUB, running_with
from tests.live.traces import agent_trace
from ttlctl.cli import app
from ttlctl.server.command import CommandError
from ttlctl.server.owned import OwnedServer


def _refused(args: list[str]) -> str:
    """``ttlctl validate ARGS``'s refusal: exit 2, one line on stderr."""
    res = CliRunner().invoke(app, ["validate", *args])
    assert res.exit_code == 2, res.output
    (line,) = res.stderr.strip().splitlines()
    return line


def _no_server_starts(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The commands of the servers (and fleets' replicas and routers) validate launches
    from now on: none may start (a launch fails the command at once, rather than after a
    model's minutes of loading)."""
    started: list[list[str]] = []

    def launch(server: OwnedServer) -> None:
        started.append(list(server.command))
        raise AssertionError(f"a server was started: {server.command}")

    monkeypatch.setattr(OwnedServer, "launch", launch)
    return started


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--kv-tokens", "8", "--model", "m", "--", "--block-size", "32"],
            "--kv-tokens 8 holds no KV block: the servers' blocks are 32 tokens (their vLLM "
            "--block-size); give at least 32",
        ),
        # as vLLM reads it: underscores, `=`, an abbreviation, the last one given
        (
            ["--kv-tokens", "20", "--model", "m", "--", "--block-size", "8", "--block_s=32"],
            "--kv-tokens 20 holds no KV block: the servers' blocks are 32 tokens (their vLLM "
            "--block-s (abbreviates --block-size)); give at least 32",
        ),
        (
            ["--kv-tokens", "20", "--engine-cmd", "vllm serve m --block-size 32"],
            "--kv-tokens 20 holds no KV block: the servers' blocks are 32 tokens (their vLLM "
            "--block-size); give at least 32",
        ),
        # no --block-size: vLLM's default, 16 tokens on a GPU (128 on a CPU), never fewer
        (
            ["--kv-tokens", "8", "--model", "m"],
            "--kv-tokens 8 holds no KV block: vLLM's blocks are at least 16 tokens (its "
            "--block-size default); give at least 16",
        ),
        (
            ["--kv-tokens", "8", "--model", "m", "--replicas", "2", "--router", "round_robin",
             "--", "--block-size", "32"],
            "--kv-tokens 8 holds no KV block: the servers' blocks are 32 tokens (their vLLM "
            "--block-size); give at least 32",
        ),
        (
            ["--kv-tokens", "64", "--model", "m", "--", "--block-size", "x"],
            "--block-size takes a number of tokens, not 'x'",
        ),
    ],
)  # fmt: skip
def test_kv_tokens_below_one_block_are_refused_before_any_server_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], line: str
) -> None:
    """--kv-tokens that hold no KV block of the servers' size, known from the arguments:
    one line naming the flag, exit 2, no server started and no work dir made (it used to
    be refused once the first server had started, served its live run and stopped)."""
    trace = agent_trace(tmp_path / "t.parquet", programs=2, calls=2)
    work = tmp_path / "w"
    started = _no_server_starts(monkeypatch)
    given = [str(trace), "--work-dir", str(work), "--profile", "llama-3.1-8b-h100", *args]
    assert _refused(given) == f"error: {line}"
    assert started == [] and not work.exists()


def test_kv_tokens_of_one_block_or_more_are_taken(tmp_path: Path) -> None:
    """The same check lets through a KV that holds a block (the server's own block size
    is checked again once it answers): a block size read in a --config file too."""
    cfg = tmp_path / "vllm.yaml"
    cfg.write_text("block_size: 64\n")
    assert given_block_size(["--config", str(cfg)]) == ("--block-size", 64)
    assert given_block_size(["--config", str(cfg), "--block-size", "16"]) == ("--block-size", 16)
    assert given_block_size(["--dtype", "half"]) is None
    for kv, args in ((32, ["--block-size", "32"]), (16, []), (100, ["--config", str(cfg)])):
        check_kv_tokens(kv, args)
    with pytest.raises(ValidateError, match=r"^--kv-tokens 63 holds no KV block: .* 64 tokens"):
        check_kv_tokens(63, ["--config", str(cfg)])
    check_kv_tokens(None, ["--block-size", "32"])  # the servers' own KV
    check_kv_tokens(8, None)  # servers given by URL: read when they answer


class _Server(BaseHTTPRequestHandler):
    """A server that answers what validate asks first (its model, its KV cache) and
    counts every other request (a warm-up or a live run would be some)."""

    cache: ClassVar[str] = ""
    others: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        if self.path == "/v1/models":
            body = json.dumps({"data": [{"id": "stub", "max_model_len": 2048}]})
        elif self.path == "/version":
            body = json.dumps({"version": "0.32.0"})
        elif self.path == "/metrics":
            body = f"vllm:cache_config_info{{{self.cache}}} 1.0\n"
        else:
            self.others.append(self.path)
            self.send_error(404)
            return
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body.encode())

    def do_POST(self) -> None:
        self.others.append(self.path)
        self.send_error(404)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize(
    ("cache", "kv", "line"),
    [
        # sized by memory (--kv-cache-memory-bytes or --gpu-memory-utilization): vLLM's
        # null block is the one block it has
        (
            'block_size="32",num_gpu_blocks="1"',
            [],
            "{url} has 1 KV block of 32 tokens (one is vLLM's null block): no usable KV "
            "block; give its KV cache more memory (vLLM's --kv-cache-memory-bytes or "
            "--gpu-memory-utilization)",
        ),
        # a block size the arguments do not say (a server given by URL)
        (
            'block_size="128",num_gpu_blocks="64"',
            ["--kv-tokens", "100"],
            "--kv-tokens 100 holds no KV block: {url} has blocks of 128 tokens "
            "(--block-size); give at least 128",
        ),
    ],
)
def test_a_kv_of_no_block_known_from_the_server_is_refused_before_its_live_run(
    tmp_path: Path, cache: str, kv: list[str], line: str
) -> None:
    """Where only the server says its KV cache: refused as soon as it answers, one line
    naming the flag, before any warm-up or live run (it used to be refused after them)."""
    trace = agent_trace(tmp_path / "t.parquet", programs=2, calls=2)
    _Server.cache, _Server.others = cache, []
    with serving(_Server) as url:
        got = _refused(
            [str(trace), "--url", f"vllm={url}", "--policy", "vllm", "--profile",
             "llama-3.1-8b-h100", "--work-dir", str(tmp_path / "w"), *kv]
        )  # fmt: skip
    assert got == "error: " + line.format(url=url)
    assert _Server.others == []


def _model(folder: Path, **config: Any) -> Path:
    """A local model folder whose config.json is the tiny preset's (1,024 KV bytes a token
    in bfloat16: 2 × 2 layers × 2 KV heads × 64), with ``config`` over it."""
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**PRESETS["tiny"], **config}))
    return folder


def test_memory_is_read_as_vllm_reads_it() -> None:
    assert memory_bytes("8M") == 8 * 2**20 and memory_bytes("8m") == 8_000_000
    assert memory_bytes("25.6k") == 25_600 and memory_bytes(" 4096 ") == 4096
    # a plain number is Python's int(), underscores and all (vLLM takes 16_384 as 16384)
    assert memory_bytes("16_384") == 16_384 and memory_bytes("+4096") == 4096
    with pytest.raises(ValidateError, match="--kv-cache-memory-bytes 16_384 holds no KV block"):
        check_kv_memory(
            ["--block-size", "32", "--kv-cache-memory-bytes", "16_384"], PRESETS["tiny"]
        )
    for refused_by_vllm in ("1.5M", "8MB", "", "lots", "1__0", "_10", "0x10"):
        assert memory_bytes(refused_by_vllm) is None


def test_memory_is_read_as_the_installed_vllms_own_parser_reads_it() -> None:
    """Held to the installed vLLM's ``human_readable_int`` itself, not to a reading of it:
    the same value for every string it takes, None for every one it refuses."""
    argparse_utils = pytest.importorskip("vllm.utils.argparse_utils")
    texts = ("8M", "8m", "25.6k", " 4096 ", "16_384", "+4096", "-5", "1K", "2G", "2.5G",
             "1.5M", "8MB", "", "lots", "1__0", "_10", "0x10", "1e3", "1_0k", "7")  # fmt: skip
    for text in texts:
        try:
            want: int | None = argparse_utils.human_readable_int(text)
        except (ValueError, TypeError, argparse.ArgumentTypeError):
            want = None
        assert memory_bytes(text) == want, text


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        (
            ["--block-size", "32", "--kv-cache-memory-bytes", "32K"],
            "--kv-cache-memory-bytes 32K holds no KV block beside vLLM's null block: a block "
            "of the model takes 32,768 bytes (32 tokens × 1,024 bytes); give at least 65,536 "
            "(vLLM refuses to start with less, once the model is loaded)",
        ),
        # vLLM's smallest default block, 16 tokens: less than two of them is refused
        (
            ["--kv_cache_memory_bytes=8000"],
            "--kv-cache-memory-bytes 8000 holds no KV block beside vLLM's null block: a block "
            "of the model takes at least 16,384 bytes (vLLM's smallest default block, 16 "
            "tokens, × 1,024 bytes); give at least 32,768 (vLLM refuses to start with less, "
            "once the model is loaded)",
        ),
        # a float32 KV cache takes twice the bytes
        (
            ["--dtype", "float32", "--block-size", "16", "--kv-cache-memory-bytes", "64000"],
            "--kv-cache-memory-bytes 64000 holds no KV block beside vLLM's null block: a "
            "block of the model takes 32,768 bytes (16 tokens × 2,048 bytes); give at least "
            "65,536 (vLLM refuses to start with less, once the model is loaded)",
        ),
    ],
)
@pytest.mark.parametrize("fleet", [[], ["--replicas", "2", "--router", "round_robin"]])
def test_kv_memory_below_two_blocks_is_refused_before_any_server_starts(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    extra: list[str],
    line: str,
    fleet: list[str],
) -> None:
    """--kv-cache-memory-bytes that leave no block beside vLLM's null block, known from the
    model's config.json and the vLLM arguments: one line naming the flag, no server
    started (vLLM itself refuses it only once the model is loaded: ~65 s with the tiny
    model on a CPU, minutes on a GPU, and validate then quoted its log's last line)."""
    trace = agent_trace(tmp_path / "t.parquet", programs=2, calls=2)
    model, work = _model(tmp_path / "tiny"), tmp_path / "w"
    started = _no_server_starts(monkeypatch)
    args = [str(trace), "--model", str(model), "--work-dir", str(work), "--profile",
            "llama-3.1-8b-h100", *fleet, "--", *extra]  # fmt: skip
    assert _refused(args) == f"error: {line}"
    assert started == [] and not work.exists()


def test_kv_memory_is_left_to_the_server_where_the_arguments_do_not_tell(
    tmp_path: Path,
) -> None:
    """Two blocks are enough; and where the KV a block takes is not known from the model's
    config and the arguments (see replay.validation.kv_memory), nothing is refused before
    the server says."""
    tiny = dict(PRESETS["tiny"])
    small = ["--block-size", "32", "--kv-cache-memory-bytes", "32K"]
    with pytest.raises(ValidateError, match="takes 32,768 bytes"):
        check_kv_memory(small, tiny)
    check_kv_memory(["--block-size", "32", "--kv-cache-memory-bytes", "64K"], tiny)
    check_kv_memory(["--block-size", "16", "--kv-cache-memory-bytes", "32K"], tiny)
    # an fp8 KV cache takes a byte a value: 32K is two blocks of 32 tokens
    check_kv_memory([*small, "--kv-cache-dtype", "fp8"], tiny)
    # a float32 model is served in 16 bits unless told
    check_kv_memory(["--kv-cache-memory-bytes", "32K"], {**tiny, "torch_dtype": "float32"})
    for args, config in [
        (small, None),  # no config.json (a hub name, --engine-cmd)
        ([*small, "-tp", "2"], tiny),  # each GPU holds a share of the KV heads
        ([*small, "--pipeline_parallel_size=2"], tiny),
        ([*small, "--kv-cache-dtype", "nvfp4"], tiny),  # a dtype ttlctl does not know
        # DeepSeek MLA's fp8 layout is not a byte a value: 8K is left to the server too
        ([*small[:3], "8K", "--kv-cache-dtype", "fp8_ds_mla"], tiny),
        ([*small, "--hf-overrides", '{"num_hidden_layers": 1}'], tiny),
        (small, {**tiny, "kv_lora_rank": 512}),  # MLA's latent KV
        (small, {**tiny, "sliding_window": 4096}),
        (small, {**tiny, "model_type": "jamba"}),
        (small, {k: v for k, v in tiny.items() if k != "num_hidden_layers"}),
        (["--block-size", "32", "--kv-cache-memory-bytes", "1.5K"], tiny),  # vLLM refuses
        (["--block-size", "32"], tiny),  # sized by --gpu-memory-utilization
        (["--block-size", "32", "--kv-cache-memory-bytes", "0"], tiny),  # a GPU's: not given
        # a quantized checkpoint: vLLM's auto KV dtype follows its KV scheme (fp8 here: 32K
        # is two blocks of 32 tokens, which vLLM starts with)
        (
            small,
            {
                **tiny,
                "quantization_config": {"quant_method": "modelopt", "kv_cache_quant_algo": "FP8"},
            },
        ),
        (
            small,
            {
                **tiny,
                "quantization_config": {
                    "quant_method": "compressed-tensors",
                    "kv_cache_scheme": {"num_bits": 8},
                },
            },
        ),
    ]:
        check_kv_memory(args, config)
    # a quantized checkpoint with the KV dtype given: that one
    quantized = {**tiny, "quantization_config": {"quant_method": "awq"}}
    with pytest.raises(ValidateError, match="takes 32,768 bytes"):
        check_kv_memory([*small, "--kv-cache-dtype", "bfloat16"], quantized)
    check_kv_memory(None, tiny)  # servers given by URL
    cfg = tmp_path / "vllm.yaml"
    cfg.write_text("kv_cache_memory_bytes: 16K\n")
    with pytest.raises(ValidateError, match=r"^--kv-cache-memory-bytes 16K holds no KV block"):
        check_kv_memory(["--config", str(cfg)], tiny)


@pytest.mark.parametrize("fleet", [[], ["--replicas", "2", "--router", "round_robin"]])
def test_a_started_server_whose_kv_holds_no_block_is_refused_and_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fleet: list[str]
) -> None:
    """A KV known only once the server answers (sized by --gpu-memory-utilization): refused
    then, one line naming the flags, with nothing left running (the server, a fleet's
    replicas and router) and nothing sent to it beyond what tells its KV (no warm-up, no
    live run)."""
    trace = agent_trace(tmp_path / "t.parquet", programs=2, calls=2)
    pids, others = tmp_path / "pids", tmp_path / "others"
    pids.mkdir()
    monkeypatch.setenv("STUB_CACHE", 'block_size="32",num_gpu_blocks="1"')
    monkeypatch.setenv("STUB_PIDS", str(pids))
    monkeypatch.setenv("STUB_OTHERS", str(others))
    line = _refused(
        [str(trace), "--policy", "vllm", "--profile", "llama-3.1-8b-h100", "--engine-cmd",
         f"{sys.executable} {STUB}", "--work-dir", str(tmp_path / "w"), *fleet]
    )  # fmt: skip
    assert re.fullmatch(
        r"error: http://127\.0\.0\.1:\d+ has 1 KV block of 32 tokens \(one is vLLM's null "
        r"block\): no usable KV block; give its KV cache more memory \(vLLM's "
        r"--kv-cache-memory-bytes or --gpu-memory-utilization\)",
        line,
    ), line
    assert len(list(pids.iterdir())) == (2 if fleet else 1)  # they did start
    assert running_with(f"STUB_OTHERS={others}") == []
    assert not others.exists()


@pytest.mark.parametrize(
    ("extra", "line"),
    [
        (
            ["--kv-events-config", "{}"],
            "--kv-events-config is set by validate behind kv_aware (each replica publishes "
            "its KV events to the router); remove it from the engine command",
        ),
        # as vLLM reads it: an abbreviation
        (
            ["--kv-events-c={}"],
            "--kv-events-c (abbreviates --kv-events-config) is set by validate behind "
            "kv_aware (each replica publishes its KV events to the router); remove it from "
            "the engine command",
        ),
    ],
)
def test_a_kv_aware_fleets_events_are_validates_to_wire(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: list[str], line: str
) -> None:
    """Behind kv_aware validate tells each replica where to publish its KV events: an
    engine command that says it too is refused before anything starts."""
    trace = agent_trace(tmp_path / "t.parquet", programs=2, calls=2)
    work = tmp_path / "w"
    started = _no_server_starts(monkeypatch)
    args = [str(trace), "--model", "m", "--work-dir", str(work), "--profile", "llama-3.1-8b-h100",
            "--replicas", "2", "--router", "kv_aware", "--", *extra]  # fmt: skip
    assert _refused(args) == f"error: {line}"
    assert started == [] and not work.exists()


def test_an_engine_command_publishing_its_own_events_is_taken_behind_other_routers() -> None:
    """Only kv_aware reads the events: behind any other router the flag is the user's."""
    check_events_flag(["cache_aware", "consistent_hash"], ["--kv-events-config", "{}"])
    check_events_flag(["kv_aware"], None)  # no engine command: validate starts no replica
    with pytest.raises(CommandError, match=r"^--kv-events-config is set by validate"):
        check_events_flag(["cache_aware", "kv_aware"], ["--kv-events-config", "{}"])
