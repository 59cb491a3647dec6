"""The prepared GPU checks (bench/gpu_profile_check.py --torch, bench/gpu_decode_check.py,
bench/gpu_chunk_check.py) in their CPU dry runs: the same code that a lent GPU runs, kept
working between loans."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from profiles.profile_read import load

pytest.importorskip("torch")
pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_profile_check_through_torch_writes_a_profile_and_its_ratios(tmp_path: Path) -> None:
    out = _run("bench/gpu_profile_check.py", "--torch", "--dry-run", "--out", str(tmp_path))
    profile = load(tmp_path / "tiny-cpu-torch.json")
    assert profile.source["engine"] == "torch-eager"
    rows = re.findall(r"^\s+(\d+)\s+([\d.]+)\s+[\d.]+\s+([\d.]+)\s+[\d.]+$", out, re.M)
    assert [int(c) for c, _, _ in rows] == [c for c, _ in profile.prefill.points]
    # measured as the profile holds it, the shipped side as tiny-cpu prices it
    shipped = load(REPO / "profiles" / "data" / "tiny-cpu.json")
    for (c, seconds), (_, measured, ship) in zip(profile.prefill.points, rows, strict=True):
        assert float(measured) == pytest.approx(seconds, abs=5e-5)
        assert float(ship) == pytest.approx(shipped.rebuild_prefill_s(c, None), abs=5e-5)
    assert "reload  32768 tokens" in out and "fit errors" in out


def test_the_decode_check_times_weights_and_attention_against_the_shipped_decode() -> None:
    out = _run("bench/gpu_decode_check.py", "--dry-run", "--runs", "2")
    weights = re.findall(r"^\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+\d+$", out, re.M)
    attention = re.findall(r"^\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+\(", out, re.M)
    assert [int(w[0]) for w in weights] == [1, 8]
    assert [(int(a[0]), int(a[1])) for a in attention] == [(2, 256), (2, 1024)]
    tiny = load(REPO / "profiles" / "data" / "tiny-cpu.json").decode
    for seqs, _, shipped_ms, _ in weights:  # the shipped side is the profile's own price
        price = (tiny.step_s + tiny.per_seq_s * int(seqs)) * 1e3
        assert float(shipped_ms) == pytest.approx(price, abs=5e-4)


def test_the_chunk_check_prices_each_chunking_as_the_profile_does() -> None:
    out = _run("bench/gpu_chunk_check.py", "--dry-run", "--repeats", "1")
    rows = re.findall(r"^\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+[\d.]+$", out, re.M)
    assert [(int(t), int(c)) for t, c, _, _ in rows] == [
        (512, 512),
        (512, 256),
        (512, 128),
        (1024, 1024),
        (1024, 256),
    ]
    tiny = load(REPO / "profiles" / "data" / "tiny-cpu.json")
    for total, chunk, measured, shipped in rows:
        one = total == chunk
        price = tiny.rebuild_prefill_s(int(total), None if one else int(chunk))
        assert float(shipped) == pytest.approx(price, abs=5e-5) and float(measured) > 0
