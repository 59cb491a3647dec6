"""What a command replaces is kept beside the bundle, and ``ttlctl bundle rollback`` puts
it back atomically, where the plugin's watcher picks it up."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fitting.policy_params import PolicyParams
from tests.bundles import EMPTY_FIT, PROFILE
from ttlctl import bundle, bundle_doc, bundle_history, bundle_make
from ttlctl.bundle_doc import BundleError
from ttlctl.cli import app
from ttlctl.engine.watch import BundleWatcher
from ttlctl.jsonio import OutputError


def doc(ttl: float) -> bundle_doc.Bundle:
    """A sealed bundle told apart by its cold-start τ."""
    return bundle_make.build(
        EMPTY_FIT,
        json.loads(PROFILE.read_text()),
        PolicyParams(cold_start_ttl_s=ttl),
        created="2026-12-01T00:00:00+00:00",
        ttlctl_version="test",
        provenance={},
    )


def run(*args: Any) -> Any:
    return CliRunner().invoke(app, [str(a) for a in args])


def test_replace_keeps_a_short_history(tmp_path: Path) -> None:
    path = tmp_path / "bundle.json"
    assert bundle_history.replace(doc(1.0), path) is None  # a first write keeps nothing
    assert not bundle_history.folder(path).exists()
    for ttl in range(2, 10):
        before = path.read_bytes()
        kept = bundle_history.replace(doc(float(ttl)), path)
        assert kept is not None and kept.read_bytes() == before
        assert kept.name.endswith(f"-{json.loads(before)['sha256'][:12]}.json")
    entries = bundle_history.entries(path)
    assert len(entries) == bundle_history.KEEP  # the oldest went
    kept_ttls = [bundle.read(e.path)["policy"]["cold_start_ttl_s"] for e in entries]
    assert kept_ttls == [4.0, 5.0, 6.0, 7.0, 8.0]
    # numbered on from the newest kept, not by how many are left: after the pruning a count
    # would give the next entry the newest one's number, and rollback (newest = highest)
    # could restore the wrong one
    assert [e.seq for e in entries] == [4, 5, 6, 7, 8]
    # the same bytes twice are kept once
    assert bundle_history.keep(path) == bundle_history.keep(path)
    assert len(bundle_history.entries(path)) == bundle_history.KEEP


def test_rollback_restores_the_previous_bundle_atomically(tmp_path: Path) -> None:
    path = tmp_path / "bundle.json"
    first, second, third = doc(1.0), doc(2.0), doc(3.0)
    for d in (first, second, third):
        bundle_history.replace(d, path)
    inode = os.stat(path).st_ino
    res = run("bundle", "rollback", path)
    assert res.exit_code == 0, res.output
    assert "rolled" in res.output and second["sha256"][:12] in res.output
    assert "1 earlier one(s) left" in " ".join(res.output.split())
    assert bundle.read(path) == second and os.stat(path).st_ino != inode  # a rename
    rolled = bundle_history.folder(path) / bundle_history.ROLLED_BACK
    assert bundle.read(rolled) == third  # what was taken out of service is kept
    assert [bundle.read(e.path) for e in bundle_history.entries(path)] == [first]
    assert run("bundle", "rollback", path).exit_code == 0
    assert bundle.read(path) == first and bundle_history.entries(path) == []
    empty = run("bundle", "rollback", path)
    assert empty.exit_code == 2 and "Traceback" not in empty.output
    assert "no earlier bundle to roll back to" in empty.output
    assert bundle.read(path) == first


def test_rollback_errors(tmp_path: Path) -> None:
    path = tmp_path / "bundle.json"
    res = run("bundle", "rollback", path)  # nothing at all: a missing file, said so
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert f"{path}: no such file" in " ".join(res.output.split())
    assert list(tmp_path.iterdir()) == []  # nothing left behind
    bundle_history.replace(doc(1.0), path)
    bundle_history.replace(doc(2.0), path)
    (entry,) = bundle_history.entries(path)
    entry.path.write_text(entry.path.read_text()[:-30])  # the kept file was damaged since
    served = path.read_bytes()
    with pytest.raises(BundleError, match=r"not valid JSON"):
        bundle_history.rollback(path)
    assert path.read_bytes() == served and entry.path.exists()  # nothing changed


def test_rollback_of_a_damaged_bundle_without_history_says_both(tmp_path: Path) -> None:
    """A damaged or edited bundle is what a rollback is for: with no history, the error
    says what is wrong with it and that there is nothing to restore (exit 2, nothing made)."""
    path = tmp_path / "bundle.json"
    path.write_text('{"broken')
    res = run("bundle", "rollback", path)
    assert res.exit_code == 2, res.output
    said = res.stderr.strip()
    assert said.startswith(f"error: {path}: line 1 column") and "not valid JSON" in said
    assert said.endswith(
        f"truncated or edited?; and no earlier bundle to roll back to ({path}.history holds "
        "none: tune, refit and bundle build keep the bundle they replace there)"
    ), said
    bundle_history.replace(doc(1.0), path)  # a sealed bundle, then edited: its checksum fails
    for entry in bundle_history.entries(path):
        entry.path.unlink()
    path.write_text(path.read_text().replace('"eta": 1.0', '"eta": 2.0'))
    res = run("bundle", "rollback", path)
    assert res.exit_code == 2 and "and no earlier bundle to roll back to" in res.stderr, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle.json", "bundle.json.history"]
    other = tmp_path / "ingest.json"  # some other JSON (an ingest report): no bundle at all
    other.write_text('{"files": [], "records": 3}')
    res = run("bundle", "rollback", other)
    assert res.exit_code == 2 and "no earlier bundle" not in res.stderr, res.stderr


def test_rollback_of_something_not_a_bundle_says_what_it_is(tmp_path: Path) -> None:
    """Regression: `bundle rollback DIR` (or a trace) said "no earlier bundle to roll back
    to (DIR.history holds none …)", as if it were a bundle without a history."""
    folder = tmp_path / "run"
    folder.mkdir()
    trace = tmp_path / "trace.parquet"
    trace.write_bytes(b"PAR1" + bytes(64) + b"PAR1")
    for path, said in [
        (folder, f"{folder}: is a directory, not a bundle"),
        (trace, f"{trace}: a Parquet file (a trace?), not a bundle"),
    ]:
        res = run("bundle", "rollback", path)
        assert res.exit_code == 2, res.output
        assert res.stderr.strip() == f"error: {said}", res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "trace.parquet"]
    assert list(folder.iterdir()) == []  # nothing made


def test_rollback_restores_a_removed_bundle_from_its_history(tmp_path: Path) -> None:
    path = tmp_path / "bundle.json"
    bundle_history.replace(doc(1.0), path)
    bundle_history.replace(doc(2.0), path)
    path.unlink()  # the served file is gone, its history is not
    res = run("bundle", "rollback", path)
    assert res.exit_code == 0, res.output
    assert bundle.read(path)["policy"]["cold_start_ttl_s"] == 1.0


def test_the_watcher_reloads_what_a_rollback_restores(tmp_path: Path) -> None:
    path = tmp_path / "bundle.json"
    bundle_history.replace(doc(1.0), path)
    env = {"TTLCTL_BUNDLE": str(path), "TTLCTL_BUNDLE_CHECK_S": "0"}
    loaded: list[str] = []
    watcher = BundleWatcher.from_env(env, loaded.append, loaded.append)
    assert watcher.policy is not None and watcher.policy.params.cold_start_ttl_s == 1.0
    bundle_history.replace(doc(2.0), path)  # a refit or a tune replaces it
    assert watcher.poll(now=1.0) and watcher.policy.params.cold_start_ttl_s == 2.0
    bundle_history.rollback(path)
    assert watcher.poll(now=2.0) and watcher.reloads == 2
    assert watcher.policy.params.cold_start_ttl_s == 1.0
    assert watcher.doc is not None and watcher.doc["sha256"] == doc(1.0)["sha256"]
    assert loaded[-1].startswith(f"ttlctl: bundle {path} reloaded")


def test_bundle_build_over_a_bundle_keeps_it(tmp_path: Path, fit_doc: dict[str, Any]) -> None:
    fit = tmp_path / "fit.json"
    fit.write_text(json.dumps(fit_doc))
    out = tmp_path / "bundle.json"
    build = ("bundle", "build", "--fit", fit, "--profile", "llama-3.1-8b-h100", "-o", out)
    assert run(*build).exit_code == 0
    first = out.read_bytes()
    assert run(*build, "--eta", "0.5").exit_code == 0
    (kept,) = bundle_history.entries(out)
    assert kept.path.read_bytes() == first


def test_a_folder_in_the_way_is_one_line_and_keeps_nothing(tmp_path: Path) -> None:
    out = tmp_path / "bundle.json"
    out.mkdir()
    with pytest.raises(OutputError, match=rf"^{out}: is a directory"):  # the CLI's one line
        bundle_history.replace(doc(1.0), out)
    assert not bundle_history.folder(out).exists()


def test_a_rollback_that_cannot_write_is_one_line_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "bundle.json"
    bundle_history.replace(doc(1.0), path)
    bundle_history.replace(doc(2.0), path)
    served = path.read_bytes()
    # something in the way of the file that keeps what a rollback takes out of service
    (bundle_history.folder(path) / bundle_history.ROLLED_BACK).mkdir()
    res = run("bundle", "rollback", path)
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    assert "cannot roll back" in res.output and str(path) in " ".join(res.output.split())
    assert path.read_bytes() == served and len(bundle_history.entries(path)) == 1


def test_a_bundle_that_cannot_be_kept_is_not_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keeping the old bundle and writing the new one happen both or neither."""
    path = tmp_path / "bundle.json"
    bundle_history.replace(doc(1.0), path)
    served = path.read_bytes()
    bundle_history.folder(path).write_text("in the way")  # the history cannot be made
    with pytest.raises(BundleError, match="cannot keep the bundle replaced"):
        bundle_history.replace(doc(2.0), path)
    assert path.read_bytes() == served  # still the old one: nothing lost
    bundle_history.folder(path).unlink()
    # a write that fails takes back the entry it made
    bundle_history.replace(doc(2.0), path)
    (first,) = bundle_history.entries(path)

    def full_disk(_doc: Any, _path: Path) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(bundle_make, "write", full_disk)
    with pytest.raises(OSError, match="No space"):
        bundle_history.replace(doc(3.0), path)
    assert [e.path for e in bundle_history.entries(path)] == [first.path]
    assert bundle.read(path) == doc(2.0)
