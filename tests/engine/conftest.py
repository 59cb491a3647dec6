"""The engine plugin's tests: in-process engines (tests/engine/harness.py) and servers.

Without vLLM installed (an install without the engine extra) only the unit tests run.
"""

import importlib.util

if importlib.util.find_spec("vllm") is None:  # an install without the engine extra
    collect_ignore = ["test_live.py", "test_pressure.py", "test_server.py", "test_stock.py"]
