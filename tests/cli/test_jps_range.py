"""A --jps so small that its arrivals leave the clock's precision is one line naming --jps,
exit 2, before any work.

`replay --jps 1e-300` put the programs' starts near 1e300 s, where a call's seconds are
lost to float precision, and printed a mean JCT of 0.00 with exit 0. replay, validate, tune
and refit read --jps through `replay.loads`, which refuses a rate under 1e-6 per second (a mean
gap of 11.6 days); that rate itself still runs.
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from tests.cli.refusal import refused
from ttlctl.cli import app

REFUSED = "error: --jps must be at least 1e-06 programs per second (a mean gap of 11.6 days)"


def test_replay_refuses_an_absurd_rate_and_runs_the_rarest_taken(
    small_inputs: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "replay.json"
    args = ["replay", str(small_inputs["trace"]), "--policy", "vllm", "--json", str(out)]
    assert refused([*args, "--jps", "1e-300"], out, REFUSED).endswith(
        "not 1e-300: rarer starts share no engine, and far rarer ones lose the calls' "
        "seconds to float precision"
    )
    res = CliRunner().invoke(app, [*args, "--jps", "1e-6"])
    assert res.exit_code == 0, res.output
    (result,) = json.loads(out.read_text())["results"]
    assert result["jct_mean_s"] > 0  # the calls' seconds survive at the rarest rate


def test_tune_and_validate_take_the_same_check(
    small_inputs: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "b.json"
    tune = ["tune", str(small_inputs["trace"]), "--fit", str(small_inputs["fit"]), "-o", str(out)]
    refused([*tune, "--profile", "llama-3.1-8b-h100", "--jps", "1", "--jps", "1e-9"], out, REFUSED)
    validate = ["validate", str(small_inputs["trace"]), "--url", "http://127.0.0.1:9"]
    refused([*validate, "--jps", "1e-300", "--json", str(out)], out, REFUSED)
