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


def test_every_method_is_the_parts_own() -> None:
    """Each method is defined once, in the scheduler or one part: two parts defining the
    same name would leave one silently unused (the first in the method resolution wins).
    The async engine's overrides are its own, on purpose, and not counted."""
    seen: dict[str, str] = {}
    for cls in SimScheduler.__mro__[:-1]:
        for name, value in vars(cls).items():
            if callable(value) or isinstance(value, property | staticmethod | classmethod):
                assert name not in seen or name.startswith("__"), (name, seen.get(name), cls)
                seen[name] = cls.__name__
    parts = {"_step_fast", "_step_reference", "_admit_waiting", "_finish", "merge_end", "tick"}
    assert parts <= set(seen)
    assert len({seen[name] for name in parts}) == len(parts)  # six parts, one each
