"""The memory a command may count on: the host's, or less where a control group caps this
process (a container, a CI job). Regression: only ``MemAvailable`` was read, so inside a
container capped at a few GiB on a large host, ``synth``'s and the profilers' memory checks
passed and the kernel killed the command without a message."""

from __future__ import annotations

from pathlib import Path

import pytest

from profiles import host

GIB = 2**30


def _group(folder: Path, **files: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("_", ".", 1)).write_text(text)


def test_cgroup_v2_room_is_the_limit_less_the_working_set(tmp_path: Path) -> None:
    # inside a container's namespace: the group is "/" and its files at the mount's top
    _group(
        tmp_path,
        memory_max=f"{4 * GIB}\n",
        memory_current=f"{3 * GIB}\n",
        memory_stat=f"anon 123\ninactive_file {GIB}\nactive_file 7\n",
    )
    assert host.cgroup_room(tmp_path, "0::/\n") == 2 * GIB  # 4 - (3 - 1 of file cache)


def test_cgroup_v2_at_the_groups_own_path_and_unlimited(tmp_path: Path) -> None:
    _group(tmp_path / "job" / "a", memory_max=f"{GIB}\n", memory_current="0\n")
    assert host.cgroup_room(tmp_path, "0::/job/a\n") == GIB
    _group(tmp_path / "job" / "b", memory_max="max\n", memory_current="5\n")
    assert host.cgroup_room(tmp_path, "0::/job/b\n") is None


def test_cgroup_v1_memory_controller(tmp_path: Path) -> None:
    text = "4:memory:/process_api/x\n3:cpuset:/\n0::/\n"
    _group(
        tmp_path / "memory",
        memory_limit_in_bytes=f"{8 * GIB}\n",
        memory_usage_in_bytes=f"{5 * GIB}\n",
        memory_stat=f"inactive_file 9\ntotal_inactive_file {2 * GIB}\n",
    )
    assert host.cgroup_room(tmp_path, text) == 5 * GIB
    # the kernel's "unlimited" (a page-rounded 2**63 - 1): no cap
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert host.cgroup_room(tmp_path, text) is None


@pytest.mark.parametrize("text", [None, "", "3:cpuset:/\n", "0::/\n"])
def test_no_group_capping_memory_is_none(tmp_path: Path, text: str | None) -> None:
    assert host.cgroup_room(tmp_path, text) is None  # no files under tmp_path


def test_a_group_over_its_limit_has_no_room(tmp_path: Path) -> None:
    _group(tmp_path, memory_max=f"{GIB}\n", memory_current=f"{2 * GIB}\n")
    assert host.cgroup_room(tmp_path, "0::/\n") == 0


def _in_a_group_of_1_gib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process in a (v2) control group limited to 1 GiB, none of it used: the
    group's folder."""
    groups = tmp_path / "groups"
    _group(groups, memory_max=f"{GIB}\n", memory_current="0\n")
    (tmp_path / "self").write_text("0::/\n")
    monkeypatch.setattr(host, "CGROUP_ROOT", groups)
    monkeypatch.setattr(host, "SELF_CGROUP", tmp_path / "self")
    return groups


def test_available_bytes_is_the_smaller_of_host_and_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    groups = _in_a_group_of_1_gib(tmp_path, monkeypatch)
    monkeypatch.setattr(host, "_host_available", lambda: 16 * GIB)
    assert host.available_bytes() == GIB
    monkeypatch.setattr(host, "_host_available", lambda: GIB // 2)
    assert host.available_bytes() == GIB // 2
    (groups / "memory.max").write_text("max\n")
    assert host.available_bytes() == GIB // 2


def test_a_limit_above_the_process_group_counts(tmp_path: Path) -> None:
    """A Slurm job, a systemd slice or a Kubernetes pod sets the limit on a group above the
    process's own, whose limit is "max". Regression: only the own group was read."""
    _group(tmp_path / "job_7", memory_max=f"{2 * GIB}\n", memory_current=f"{GIB}\n")
    _group(tmp_path / "job_7" / "step_0", memory_max="max\n", memory_current=f"{GIB // 2}\n")
    _group(tmp_path, memory_max="max\n", memory_current=f"{64 * GIB}\n")
    assert host.cgroup_room(tmp_path, "0::/job_7/step_0\n") == GIB
    # the tightest level wins: the own group's limit below the job's
    (tmp_path / "job_7" / "step_0" / "memory.max").write_text(f"{GIB}\n")
    assert host.cgroup_room(tmp_path, "0::/job_7/step_0\n") == GIB // 2
    v1 = tmp_path / "v1"
    _group(v1 / "memory" / "slice", memory_limit_in_bytes=f"{3 * GIB}\n",
           memory_usage_in_bytes=f"{GIB}\n")  # fmt: skip
    _group(v1 / "memory" / "slice" / "unit", memory_limit_in_bytes="9223372036854771712\n",
           memory_usage_in_bytes="0\n")  # fmt: skip
    assert host.cgroup_room(v1, "4:memory:/slice/unit\n") == 2 * GIB


def test_an_unknown_host_figure_leaves_the_groups_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The host's figure is 0 when unknown: the group's room is then the answer."""
    _in_a_group_of_1_gib(tmp_path, monkeypatch)
    monkeypatch.setattr(host, "_host_available", lambda: 0)
    assert host.available_bytes() == GIB


def test_a_v1_limit_at_the_kernels_unlimited_is_no_limit(tmp_path: Path) -> None:
    _group(
        tmp_path / "memory",
        memory_limit_in_bytes=f"{1 << 60}\n",
        memory_usage_in_bytes=f"{GIB}\n",
    )
    assert host.cgroup_room(tmp_path, "4:memory:/\n") is None


def test_the_hosts_figure_is_memavailable_in_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``/proc/meminfo`` counts in kB of 1,024 bytes."""
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:   12345678 kB\n")
    monkeypatch.setattr(host, "MEMINFO", meminfo)
    assert host._host_available() == 12345678 * 1024
