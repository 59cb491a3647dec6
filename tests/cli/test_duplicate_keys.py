"""A key given twice in one object of a JSON document ttlctl reads (a bundle, a fit, a
profile …) is refused in one line naming the file, the key and where, exit 2. Regression:
JSON's parser kept the last of the two silently, so a bundle with an edited ``policy``
written above the sealed one passed ``bundle verify`` ("ok") though docs/bundle.md says
verify exits 2 on any edit, and the engine served it."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from tests.cli.refusal import refused
from ttlctl.cli import app


def _above(path: Path, key: str, value: object, to: Path) -> Path:
    """``path``'s document with ``"key": value`` written again above its own, at ``to``."""
    text = path.read_text(encoding="utf-8")
    assert text.startswith("{\n") and f'\n "{key}": ' in text
    to.write_text("{\n " + json.dumps(key) + ": " + json.dumps(value) + ",\n" + text[2:])
    return to


def test_a_bundle_with_an_edited_policy_above_its_own_fails_verify(
    small_inputs: dict[str, Path], tmp_path: Path
) -> None:
    sound = tmp_path / "bundle.json"
    build = ["bundle", "build", "--fit", str(small_inputs["fit"]), "--profile",
             "llama-3.1-8b-h100", "-o", str(sound)]  # fmt: skip
    assert CliRunner().invoke(app, build).exit_code == 0
    policy = json.loads(sound.read_text(encoding="utf-8"))["policy"]
    edited = {**policy, "k": 0}  # every tool priced on its own samples
    bundle = _above(sound, "policy", edited, tmp_path / "edited.json")
    said = f'error: {bundle}: duplicate key "policy" at the top level; truncated or edited?'
    for command in (["bundle", "verify"], ["bundle", "inspect"]):
        assert refused([*command, str(bundle)], tmp_path / "none", "error:") == said
    line = refused(["serve", "m", "--bundle", str(bundle), "--print-command"],
                   tmp_path / "none", "error:")  # fmt: skip
    assert f'{bundle}: duplicate key "policy" at the top level' in line


def test_a_fit_with_a_duplicate_key_fails_bundle_build(
    small_inputs: dict[str, Path], tmp_path: Path
) -> None:
    fit = _above(small_inputs["fit"], "k", 5, tmp_path / "fit.json")
    out = tmp_path / "bundle.json"
    build = ["bundle", "build", "--fit", str(fit), "--profile", "llama-3.1-8b-h100",
             "-o", str(out)]  # fmt: skip
    assert refused(build, out, "error:") == f'error: {fit}: duplicate key "k" at the top level'
