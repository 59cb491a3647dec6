"""``make vllm-check``'s tool (``tests/tools/vllm_release.py``): what it takes of a wheel, where
it keeps it, and its refusals. Its checks themselves are the suite's own tests, run on a
release's sources (docs/testing.md)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from tests.tools import vllm_release


def test_only_the_wheels_python_files_of_vllm_are_unpacked(tmp_path: Path) -> None:
    wheel = tmp_path / "vllm-9.9.9-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name in ("vllm/__init__.py", "vllm/v1/core/block_pool.py", "vllm/_C.abi3.so"):
            archive.writestr(name, "x = 1\n")
        archive.writestr("vllm-9.9.9.dist-info/METADATA", "Name: vllm\n")
        archive.writestr("other/thing.py", "")
    vllm_release.unpack(wheel, tmp_path / "src")
    found = sorted(
        p.relative_to(tmp_path / "src").as_posix() for p in (tmp_path / "src").rglob("*")
    )
    assert found == [
        "vllm",
        "vllm/__init__.py",
        "vllm/v1",
        "vllm/v1/core",
        "vllm/v1/core/block_pool.py",
    ]


def test_a_release_already_unpacked_is_not_fetched_again(tmp_path: Path) -> None:
    kept = tmp_path / "0.99.0" / "vllm"
    kept.mkdir(parents=True)
    (kept / "__init__.py").write_text("")
    assert vllm_release.sources("0.99.0", tmp_path) == tmp_path / "0.99.0"


def test_a_folder_without_vllm_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert vllm_release.main(["0.34.0", "--sources", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {tmp_path}: no vllm package (vllm/__init__.py) there\n"


def test_the_checks_run_the_repo_and_the_sources_ahead_of_the_installed_vllm(
    tmp_path: Path,
) -> None:
    env = vllm_release.environment(tmp_path)
    claim, repo, src = env["PYTHONPATH"].split(":")
    assert (Path(claim) / "sitecustomize.py").is_file()
    assert Path(repo) == vllm_release.REPO and Path(src) == tmp_path
    assert env["TTLCTL_VLLM_SOURCES"] == str(tmp_path) and env["VLLM_TARGET_DEVICE"] == "cpu"
