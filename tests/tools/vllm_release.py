"""Check the plugin and the vLLM backend against a vLLM release that cannot be installed here.

    python -m tests.tools.vllm_release 0.34.0 [--sources DIR] [--cache DIR]

(``make vllm-check VLLM=0.34.0``.) vLLM's CUDA wheels cannot be installed on a CPU
machine, and there is no CPU build of every release, but the scheduler, the KV cache
manager and the block pool are plain Python: the plugin's hooks and rules can be run on
a release's own classes with no model. This downloads the release's wheel
(``pip download vllm==X --no-deps``, once: kept under ``--cache``), unpacks its Python
files, and runs, each in its own process, with the unpacked ``vllm`` ahead of the
installed one on ``PYTHONPATH``:

- ``tests/tools/vllm_hooks.py``: every hook of the release is there with a signature the
  plugin can use, the call sites the plugin's docstrings cite, where the prefix cache's
  map changes (static, with ``ast``);
- ``tests/tools/scheduler_probe.py``, sync and ``--async``: the plugin inside the
  release's ``Scheduler``, stepped by hand (a pin survives a flood, none without a
  bundle, the valve admits a big call);
- pytest on ``tests/engine/test_compat.py`` (the static check of these sources included:
  ``TTLCTL_VLLM_SOURCES``), ``tests/engine/test_hitmemo.py`` (the prefix-hit memo on the
  release's real manager and pool), ``tests/server/test_vllm_parser.py`` (how ``serve`` and
  ``validate`` read vLLM's flags, against the release's own parser), the release's KV-event
  publisher binding the endpoint a live ``kv_aware`` fleet gives it
  (``tests/server/test_kv_events.py``) and ``tests/vllmsim``
  (the fast simulator against the release's scheduler, call by call, and ``replay
  --backend vllm``).

``tests/tools/claim_triton`` is on the path too (vLLM 0.34's CPU platform refuses an x86
CPU without Triton when a config is built; nothing here runs a kernel). It prints one
line per check and exits 0 when all pass, 1 when one fails, 2 when the release cannot be
fetched. ``--sources`` names a folder already holding the release's ``vllm`` package
instead (a source checkout, or an unpacked wheel).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CLAIM = Path(__file__).resolve().parent / "claim_triton"
CACHE = Path.home() / ".cache" / "ttlctl" / "vllm-sources"
TESTS = (
    "tests/engine/test_compat.py",
    "tests/engine/test_hitmemo.py",
    "tests/server/test_vllm_parser.py",
    "tests/server/test_kv_events.py::test_vllm_binds_the_publisher_on_loopback_only",
    "tests/vllmsim",
)


class FetchError(Exception):
    """The release's sources could not be had."""


@dataclass(frozen=True)
class Check:
    name: str
    argv: tuple[str, ...]


def checks(python: str) -> list[Check]:
    return [
        Check("hooks (static)", (python, "-m", "tests.tools.vllm_hooks", "{src}")),
        Check("scheduler probe, sync", (python, "-m", "tests.tools.scheduler_probe")),
        Check("scheduler probe, async", (python, "-m", "tests.tools.scheduler_probe", "--async")),
        Check("pytest " + ", ".join(TESTS), (python, "-m", "pytest", "-q", "-x", *TESTS)),
    ]


def unpack(wheel: Path, into: Path) -> None:
    """The wheel's ``vllm/**/*.py`` under ``into``."""
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.startswith("vllm/") and name.endswith(".py"):
                archive.extract(name, into)


def sources(version: str, cache: Path) -> Path:
    """The release's unpacked Python files (fetched and unpacked once)."""
    folder = cache / version
    if (folder / "vllm" / "__init__.py").is_file():
        return folder
    with tempfile.TemporaryDirectory(prefix="ttlctl-vllm-wheel-") as tmp:
        pip = [sys.executable, "-m", "pip", "download", f"vllm=={version}", "--no-deps"]
        got = subprocess.run(
            [*pip, "--only-binary", ":all:", "-d", tmp], capture_output=True, text=True
        )
        wheels = sorted(Path(tmp).glob("vllm-*.whl"))
        if got.returncode != 0 or not wheels:
            said = [x for x in (got.stderr or got.stdout).splitlines() if x.strip()]
            raise FetchError(f"pip could not fetch vllm=={version}: {said[-1] if said else '?'}")
        partial = folder.with_name(folder.name + ".partial")
        partial.mkdir(parents=True, exist_ok=True)
        unpack(wheels[0], partial)
        partial.rename(folder)
    return folder


def environment(src: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(CLAIM), str(REPO), str(src)])
    env["VLLM_TARGET_DEVICE"] = "cpu"
    env["TTLCTL_VLLM_SOURCES"] = str(src)
    return env


def run(src: Path, python: str = sys.executable) -> int:
    """Every check on ``src``; the number that failed."""
    env = environment(src)
    failed = 0
    for check in checks(python):
        argv = [a.replace("{src}", str(src)) for a in check.argv]
        start = time.monotonic()
        done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
        took = time.monotonic() - start
        lines = [x for x in (done.stdout + done.stderr).splitlines() if x.strip()]
        ok = done.returncode == 0
        failed += not ok
        tail = next((x for x in reversed(lines) if "passed" in x or "found" in x), "")
        print(
            f"{'ok  ' if ok else 'FAIL'}  {check.name} ({took:.0f} s){f': {tail}' if tail else ''}"
        )
        if not ok:
            print("\n".join("      " + x for x in lines[-30:]))
    return failed


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.tools.vllm_release")
    parser.add_argument("version", help="the vLLM release, e.g. 0.34.0")
    parser.add_argument("--sources", type=Path, help="a folder holding its vllm package")
    parser.add_argument("--cache", type=Path, default=CACHE, help=f"(default {CACHE})")
    args = parser.parse_args(argv)
    try:
        src = args.sources if args.sources is not None else sources(args.version, args.cache)
    except (FetchError, OSError, zipfile.BadZipFile) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not (src / "vllm" / "__init__.py").is_file():
        print(f"error: {src}: no vllm package (vllm/__init__.py) there", file=sys.stderr)
        return 2
    print(f"vLLM {args.version}: its sources at {src}")
    return 1 if run(src) else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
