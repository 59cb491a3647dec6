"""vLLM's router started with ttlctl's calibration: no reference-calibration warning
(the router alone, no replicas: the warning is written at start, before any worker)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from profiles import shipped
from profiles.router_calibration import calibrate
from tests.router_bin import router_or_skip
from ttlctl.server import router
from ttlctl.server.owned import OwnedServer
from ttlctl.server.process import free_port


def _router_log(tmp_path: Path, name: str, program_scheduling_json: str) -> str:
    command = router_or_skip()
    port = free_port()
    server = OwnedServer(
        router.router_command(
            [],
            port=port,
            program_scheduling_json=program_scheduling_json,
            command=command,
            prometheus_port=free_port(),
        ),
        dict(os.environ),
        tmp_path / f"{name}.log",
        f"http://127.0.0.1:{port}",
        startup_timeout_s=60.0,
        name="vllm-router",
    )
    with server:
        pass
    return router.plain(server.log_path.read_text(errors="replace"))


@pytest.mark.parametrize("profile", ["tiny-cpu", "llama-3.1-8b-h100"])
def test_the_router_starts_calibrated_without_its_warning(tmp_path: Path, profile: str) -> None:
    value = calibrate(shipped.resolve(profile)[0]).flag_value()
    log = _router_log(tmp_path, "calibrated", value)
    assert "Router ready" in log
    assert not router.reference_calibration_warned(log), log[-2000:]


def test_the_router_warns_on_its_reference_coefficients(tmp_path: Path) -> None:
    """The control: the same start with one coefficient left out warns, naming it."""
    doc = calibrate(shipped.resolve("tiny-cpu")[0]).to_json()
    del doc["prefill_cost_model"]["decode_throughput_alpha"]
    log = _router_log(tmp_path, "reference", json.dumps(doc))
    assert router.reference_calibration_warned(log)
    assert "defaulted_fields=prefill_cost_model.decode_throughput_alpha " in log
