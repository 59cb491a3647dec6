"""CPU seconds of a process group (ttlctl/server/cpu_time.py), read from /proc: the group's
figure counts its live members and the children each has waited for, so a member that ends
during the reading still counts; a group that is gone reads None; this process is the
client."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ttlctl.server.cpu_time import SELF, cpu_used, group_cpu_s

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")

#: burns CPU for about 0.4 s once told to go (a line on stdin), then says so
BURN = (
    "import sys, time\nsys.stdin.readline()\nt = time.process_time()\n"
    "while time.process_time() - t < 0.4: pass\nprint('done', flush=True)\n"
)
#: a group leader that starts two such children: the first is waited for (ends and is
#: reaped inside the reading), the second lives on, burnt, until the group is killed
TREE = f"""
import subprocess, sys, time
BURN = {BURN!r}
kids = [subprocess.Popen([sys.executable, "-c", BURN + (s if i else "")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for i, s in enumerate(["", "time.sleep(60)"])]
print("ready", flush=True)
sys.stdin.readline()
for kid in kids:
    kid.stdin.write("go\\n"); kid.stdin.flush()
for kid in kids:
    kid.stdout.readline()
kids[0].wait()
print("burnt", flush=True)
time.sleep(60)
"""


def test_a_group_counts_its_members_live_or_reaped_and_a_gone_group_reads_none() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", TREE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its pid is its group's, as launch() starts a server
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        assert proc.stdout.readline().strip() == "ready"  # every child started, none burnt
        with cpu_used({"group": proc.pid, "gone": None}) as used:
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == "burnt"
            t = time.process_time()
            while time.process_time() - t < 0.1:  # the client's own work
                pass
        # both children's 0.4 s: the live one from its own entry, the reaped one from its
        # parent's child fields (without them the figure would fall as it ends)
        assert used["group"] is not None and 0.75 <= used["group"] < 2.0
        assert used["gone"] is None
        # os.times counts in clock ticks, process_time in nanoseconds: the two readings'
        # tick boundaries can take up to two ticks off the client's 0.1 s (CI read 0.09 - 1e-14)
        assert used[SELF] is not None and used[SELF] >= 0.1 - 2.0 / os.sysconf("SC_CLK_TCK")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the live child too
        proc.wait()
    # the orphaned child dies when the kill reaches it, a moment after killpg returns
    deadline = time.monotonic() + 10.0
    while group_cpu_s([proc.pid]) != {proc.pid: None} and time.monotonic() < deadline:
        time.sleep(0.01)
    assert group_cpu_s([proc.pid]) == {proc.pid: None}
