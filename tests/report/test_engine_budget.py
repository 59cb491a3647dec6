"""``ttlctl report --max-num-batched-tokens N``: the τ* curves price a miss in steps of the
serving engine's budget, through the one pricing function (:func:`ttlctl.bundle.policy_from`),
as ``bundle inspect`` and ``query`` do; without it, the bundle's profile's budget."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.report.pages import section
from ttlctl import bundle
from ttlctl.cli import app
from ttlctl.report import build_report
from ttlctl.report.rundir import load
from ttlctl.report.tau import CONTEXT_GRID

SMALL = 256  # far below the samples' contexts: a rebuild takes many steps


def test_the_curves_are_priced_in_the_engines_budget(sample_run: Path) -> None:
    doc = bundle.read(sample_run / "bundle.json")
    default, small = load(sample_run), load(sample_run, SMALL)
    assert default.engine_budget is None and small.engine_budget == SMALL
    tools = [None, *(default.fit or {}).get("tools", {})]
    priced, measured = bundle.policy_from(doc, SMALL), bundle.policy_from(doc)
    raised = 0
    for t in (0.0, small.queue_delay_s):
        for tool in tools:
            for context in CONTEXT_GRID:
                want = priced.decide(tool, context, queue_delay_s=t)
                got = small.decide(tool, context, t)
                assert got == want
                # default unchanged: the profile's own budget, as policy_from without one
                base = default.decide(tool, context, t)
                assert base == measured.decide(tool, context, queue_delay_s=t)
                # more steps, each paying its fixed cost: a dearer miss, never a shorter τ*
                if context > SMALL:
                    assert got.benefit_s > base.benefit_s
                assert got.ttl_s >= base.ttl_s
                raised += got.ttl_s > base.ttl_s
    assert raised > 0  # the dearer miss keeps some call's KV longer


def test_the_page_says_which_budget_and_differs(sample_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(sample_run / "bundle.json", run / "bundle.json")
    out = {}
    for budget in (None, SMALL):
        html = tmp_path / f"{budget}.html"
        extra = [] if budget is None else ["--max-num-batched-tokens", str(budget)]
        res = CliRunner().invoke(app, ["report", str(run), "-o", str(html), *extra])
        assert res.exit_code == 0, res.output
        out[budget] = html.read_text(encoding="utf-8")
    assert out[None] == build_report(run)  # the default is the library's default
    assert "in one step (the bundle&#x27;s profile records no budget)" in out[None]
    assert "in steps of 256 tokens (the serving engine&#x27;s" in out[SMALL]
    drawn = [section(page, "tau") for page in out.values()]
    assert drawn[0] != drawn[1]  # the τ* curves drawn differ


@pytest.mark.parametrize("bad", ["0", "-5", "many"])
def test_a_bad_budget_is_one_line_exit_2(sample_run: Path, tmp_path: Path, bad: str) -> None:
    html = tmp_path / "r.html"
    res = CliRunner().invoke(
        app, ["report", str(sample_run), "-o", str(html), "--max-num-batched-tokens", bad]
    )
    assert res.exit_code == 2, res.output
    assert res.output.startswith("error: ") and res.output.count("\n") == 1
    assert "--max-num-batched-tokens" in res.output
    assert not html.exists()
