"""ttlctl/server/docker_run.py: where a `docker run`'s options end and its image begins,
as docker's flag parser reads them; its tables of switches checked on docker's own help
where docker is installed."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from ttlctl.server import docker_run


def test_the_image_follows_dockers_options_as_pflag_reads_them() -> None:
    for cmd, image in [
        ("docker run img --model m", 2),
        ("docker run -dp 8000:8000 img -dp 2", 4),  # -d -p 8000:8000
        ("docker run -itd -p8000:8000 -p=1:1 -e X=1 img", 7),
        ("docker run --rm --gpus all --shm-size=1g --sig-proxy=false img", 7),
        ("docker run -- img -x", 3),
        ("sudo /usr/bin/docker --debug -H h container run -t img", 8),
        ("nvidia-docker run -t img", 3),
    ]:
        words = cmd.split()
        end = docker_run.image_end(words)
        assert end is not None and words[end - 1] == "img", cmd
        assert end == image + 1, cmd
    for cmd in ("docker ps -dp 1", "docker run -d", "podman run -t img", "srun -p gpu img"):
        assert docker_run.image_end(cmd.split()) is None, cmd


def _switches(help_text: str) -> tuple[set[str], set[str]]:
    """(one-letter, long) options that `docker … --help` lists without a value type."""
    short: set[str] = set()
    long: set[str] = set()
    for line in help_text.splitlines():
        found = re.match(r"\s+(?:-(\w), )?--([\w-]+)(?: (\S+))?\s{2,}\S", line)
        if found is None or found[3] is not None:
            continue
        long.add(found[2])
        if found[1]:
            short.add(found[1])
    return short, long


@pytest.mark.skipif(shutil.which("docker") is None, reason="docker's own help is the reference")
def test_the_switches_are_dockers() -> None:
    def help_of(*args: str) -> str:
        return subprocess.run(
            ["docker", *args, "--help"], capture_output=True, text=True, timeout=60, check=True
        ).stdout

    assert _switches(help_of("run")) == (
        set(docker_run.SHORT_SWITCHES),
        set(docker_run.LONG_SWITCHES),
    )
    short, long = _switches(help_of())  # (its own --help is not listed there)
    assert (short, long | {"help"}) == (
        set(docker_run.GLOBAL_SHORT_SWITCHES),
        set(docker_run.GLOBAL_LONG_SWITCHES),
    )
