"""The serving image's install, for real: ttlctl alone in a fresh venv, without the
trainer's packages. The plugin's side (the bundle, the policy, the engine's rules) works
there; the ``ttlctl`` command says in one line what to install; and pip resolves no
third-party dependency for the bare package.

The wheel is built once per session from this checkout (``pip wheel --no-deps``: pip's
build isolation fetches the setuptools that pyproject.toml names) and installed in the
venv by the serving image's own pip line (deploy/Dockerfile, read by tests/deploy_kit.py:
``--no-deps --no-index``): nothing else reaches it, and the image installs what is tested.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import venv
import zipfile
from email.parser import Parser
from pathlib import Path
from typing import Any

import pytest

from fitting.policy_params import PolicyParams
from profiles.shipped import resolve
from tests.deploy_kit import serving_install, wheel_glob
from ttlctl import bundle, bundle_make
from ttlctl.launcher import TRAINER_PACKAGES

REPO = Path(__file__).resolve().parents[2]
#: the packages of pyproject.toml's [tool.setuptools.packages.find]
PACKAGES = ("ttlctl", "fitting", "replay", "profiles")
TRAINER = ("optuna", "psycopg2", "matplotlib", "polars", "numpy", "scipy", "typer", "rich")


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # from a copy of what a wheel is made of: setuptools writes build/ beside the sources
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for package in PACKAGES:
        shutil.copytree(
            REPO / package, source / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    out = tmp_path_factory.mktemp("wheel")
    res = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(source)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    (found,) = out.glob("ttlctl-*.whl")
    return found


@pytest.fixture(scope="session")
def serving_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("serving") / "venv"
    venv.create(root, with_pip=True, symlinks=True)
    python = root / "bin" / "python"
    line = serving_install()  # the image's: `pip install … /tmp/wheels/ttlctl-*.whl`
    assert wheel.match(wheel_glob(line).rsplit("/", 1)[-1])
    res = _run(python, "-m", "pip", *[str(wheel) if a == wheel_glob(line) else a for a in line])
    assert res.returncode == 0, res.stderr
    return root


def _run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    # no PYTHONPATH, and not from the checkout: only what the venv holds is importable
    env = {"PATH": "/usr/bin:/bin", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    return subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, env=env, cwd=cwd or Path("/")
    )


def test_the_wheel_asks_for_nothing_and_ships_the_profiles(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(zf.read(meta).decode())
    requires = metadata.get_all("Requires-Dist") or []
    assert requires and all("extra ==" in r for r in requires), requires
    by_extra: dict[str, set[str]] = {}
    for r in requires:
        name = r.split(";")[0].split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip()
        extra = r.split("extra ==")[1].strip().strip("'\"")
        by_extra.setdefault(extra, set()).add(name.lower())
    assert set(metadata.get_all("Provides-Extra") or []) >= {"serve", "train", "postgres"}
    assert by_extra["serve"] == {"typer", "rich"}
    assert {*TRAINER_PACKAGES} <= by_extra["train"] and "psycopg2-binary" not in by_extra["train"]
    assert by_extra["postgres"] == {"psycopg2-binary"}
    assert "profiles/data/llama-3.1-8b-h100.json" in names


def test_the_plugin_side_works_without_the_trainer(
    serving_venv: Path, fit_doc: dict[str, Any], tmp_path: Path
) -> None:
    """A bundle from a real fit (the synthetic trace's), read and asked as the engine does."""
    profile, _ = resolve("llama-3.1-8b-h100")
    doc = bundle_make.assemble(fit_doc, profile.to_json(), PolicyParams(valve="stall-only"), {})
    path = tmp_path / "bundle.json"
    bundle_make.write(doc, path)
    expected = bundle.policy_from(doc).decide("grep", 32_000, queue_delay_s=1.5).to_json()
    code = (
        "import json, sys\n"
        "import ttlctl.engine.retention, ttlctl.engine.watch, ttlctl.bundle, fitting.policy\n"
        f"policy, doc = ttlctl.bundle.load_policy({str(path)!r}, print)\n"
        "decision = policy.decide('grep', 32000, queue_delay_s=1.5)\n"
        f"third = [m for m in {TRAINER!r} + ('vllm', 'torch') if m in sys.modules]\n"
        "print(json.dumps({'decision': decision.to_json(), 'loaded': third,"
        " 'where': ttlctl.bundle.__file__}))\n"
    )
    res = _run(serving_venv / "bin" / "python", "-c", code)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.splitlines()[-1])
    assert out["decision"] == expected and out["decision"]["source"] == "tool"
    assert out["loaded"] == []
    assert out["where"].startswith(str(serving_venv))  # the installed copy, not the checkout
    listed = _run(serving_venv / "bin" / "python", "-m", "pip", "list", "--format", "json")
    names = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert not names & {*TRAINER, "psycopg2-binary", "vllm", "torch"}, names


def test_the_command_says_what_to_install(serving_venv: Path) -> None:
    for args in (("--help",), ("fit", "trace.parquet", "-o", "fit.json"), ()):
        res = _run(serving_venv / "bin" / "ttlctl", *args)
        assert res.returncode == 2, res
        assert res.stdout == "" and "Traceback" not in res.stderr
        lines = res.stderr.splitlines()
        assert len(lines) == 1
        assert lines[0].startswith("error: the ttlctl command needs typer and rich")
        assert "pip install 'ttlctl[train]'" in lines[0] and "'ttlctl[serve]'" in lines[0]


def test_pip_resolves_no_dependency_for_the_bare_package(
    serving_venv: Path, wheel: Path, tmp_path: Path
) -> None:
    report = tmp_path / "report.json"
    res = _run(
        serving_venv / "bin" / "python", "-m", "pip", "install", "--dry-run", "--ignore-installed",
        "--no-index", "--quiet", "--report", report, wheel,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr  # no index: any dependency would fail to resolve
    installs: list[dict[str, Any]] = json.loads(report.read_text())["install"]
    assert [i["metadata"]["name"] for i in installs] == ["ttlctl"]


def test_a_command_without_a_trainer_package_is_one_line(tmp_path: Path) -> None:
    """The CLI installed, a trainer's package not (polars hidden): one line, exit 2."""
    code = (
        "import sys\n"
        "sys.modules['polars'] = None  # as if it were not installed\n"
        "sys.argv = ['ttlctl', 'fit', 'trace.parquet', '-o', 'fit.json']\n"
        "from ttlctl.launcher import main\n"
        "main()\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.splitlines() == [
        "error: fit needs the trainer's packages (polars is not installed): "
        "pip install 'ttlctl[train]'"
    ]
