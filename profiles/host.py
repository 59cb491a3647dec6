"""What this machine is, for profile measurement: the CPU's name and the memory available
(the host's, or the room left in this process's memory control group where one caps it).

Linux ``/proc`` first, portable fallbacks after; standard library only.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what :mod:`platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def available_bytes() -> int:
    """Memory available to a new allocation: the host's (``MemAvailable``), or less where
    this process's control group caps it (a container, a CI job: :func:`cgroup_room`); 0
    when unknown."""
    host = _host_available()
    room = cgroup_room(CGROUP_ROOT, _read(SELF_CGROUP))
    if room is None:
        return host
    return room if host <= 0 else min(host, room)


def _host_available() -> int:
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 0


#: where the control groups are mounted, and the file naming this process's groups
CGROUP_ROOT = Path("/sys/fs/cgroup")
#: the host's memory figures (``MemAvailable``, in kB of 1,024 bytes)
MEMINFO = Path("/proc/meminfo")
SELF_CGROUP = Path("/proc/self/cgroup")
#: a cgroup v1 limit this high is no limit (the kernel's "unlimited", rounded to pages)
_UNLIMITED = 1 << 60


def cgroup_room(root: Path, self_cgroup: str | None) -> int | None:
    """Bytes this process's memory control groups still have room for: the least, over its
    group and every group above it that sets a limit, of the limit less the group's working
    set (what it uses less the file cache it could drop, as the kernel's and Kubernetes' own
    figures count it); None when no group caps the memory (or none is found). A limit may sit
    above the process's own group (a Slurm job's, a systemd slice's, a Kubernetes pod's), so
    each level up to the mount's top is read. ``self_cgroup``: the text of
    ``/proc/self/cgroup``; ``root``: where the groups are mounted. cgroup v2
    (``memory.max``, ``memory.current``) and v1 (``memory.limit_in_bytes``,
    ``memory.usage_in_bytes``) alike; inside a container's namespace the process's path
    names no folder and the mount's top is its group."""
    if not self_cgroup:
        return None
    rooms: list[int] = []
    for line in self_cgroup.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and not controllers:  # v2: one unified hierarchy
            files = ("memory.max", "memory.current", "inactive_file")
            top = root
        elif "memory" in controllers.split(","):  # v1: the memory controller's hierarchy
            files = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
            top = root / "memory"
        else:
            continue
        folder = top / path.strip("/")
        while True:
            room = _room(folder, *files)
            if room is not None:
                rooms.append(room)
            if folder == top:
                break
            folder = folder.parent
    return min(rooms) if rooms else None


def _room(folder: Path, limit: str, usage: str, cache: str) -> int | None:
    """The room in the group at ``folder`` (None: no such group, or it sets no limit)."""
    cap = _number(_read(folder / limit))
    if cap is None or cap >= _UNLIMITED:  # "max" (v2) is no number; v1's unlimited is huge
        return None
    used = _number(_read(folder / usage))
    if used is None:
        return None
    dropped = 0
    for line in (_read(folder / "memory.stat") or "").splitlines():
        key, _, value = line.partition(" ")
        if key == cache and value.strip().isdigit():
            dropped = int(value)
    return max(0, cap - max(0, used - dropped))


def _read(path: Path | str) -> str | None:
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError):
        return None


def _number(text: str | None) -> int | None:
    text = (text or "").strip()
    return int(text) if text.isdigit() else None
