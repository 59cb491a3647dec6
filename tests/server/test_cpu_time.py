"""CPU seconds of a process tree (ttlctl/server/cpu_time.py), read from /proc: a parent's
figure counts its live children's, a process that is gone reads None, and this process is
counted as the client."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ttlctl.server.cpu_time import SELF, cpu_used, tree_cpu_s

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")

#: a child that starts a grandchild burning CPU for about 0.4 s, then sleeps until killed
TREE = """
import subprocess, sys, time
burn = (
    "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.4: pass\\n"
    "print('done', flush=True)\\ntime.sleep(60)"
)
child = subprocess.Popen([sys.executable, "-c", burn], stdout=subprocess.PIPE, text=True)
child.stdout.readline()
print("burnt", flush=True)
time.sleep(60)
"""


def test_a_tree_counts_its_live_descendants_and_a_gone_process_reads_none() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        with cpu_used({"tree": proc.pid, "gone": None}) as used:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "burnt"
            t = time.process_time()
            while time.process_time() - t < 0.1:  # the client's own work
                pass
        # the grandchild's 0.4 s (with two interpreters' start-up) is the parent's figure
        assert used["tree"] is not None and used["tree"] >= 0.35
        assert used["gone"] is None
        assert used[SELF] is not None and used[SELF] >= 0.09
        # the parent alone, once the tree is read: it did little but wait
        alone = tree_cpu_s([proc.pid])[proc.pid]
        assert alone is not None and alone >= used["tree"]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the grandchild too
        proc.wait()
    assert tree_cpu_s([proc.pid]) == {proc.pid: None}
