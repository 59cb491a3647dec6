"""The scheduler assembled from its parts (``replay/sched_*.py``, mixins of one concept
each) is still one slotted class: an engine has no ``__dict__``."""

from __future__ import annotations

import pytest

from profiles.cost import ConstantCostModel
from replay.async_sched import AsyncSimScheduler
from replay.policies.simple import VLLM
from replay.scheduler import SimScheduler, SimSchedulerConfig


@pytest.mark.parametrize("kind", [SimScheduler, AsyncSimScheduler])
def test_an_engine_has_no_dict(kind: type[SimScheduler]) -> None:
    """A part without ``__slots__ = ()`` would give every engine a ``__dict__``: slower
    field reads on the hot path, and a misspelt field assigned without a word."""
    engine = kind(SimSchedulerConfig(kv_tokens=64, block_size=4), ConstantCostModel(), VLLM())
    assert not hasattr(engine, "__dict__")
    with pytest.raises(AttributeError):
        setattr(engine, "_prefiling", [])  # noqa: B010 (a name no field has)
    engine._prefilling = []  # a field is assigned as before
