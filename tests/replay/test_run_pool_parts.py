"""The run pool assembled from its parts (``replay/kv/run_*.py``, mixins of one concept
each) is still one slotted class: a pool has no ``__dict__``."""

from __future__ import annotations

import pytest

from replay.kv import RunPool


def test_a_pool_has_no_dict() -> None:
    """A part without ``__slots__ = ()`` would give every pool a ``__dict__``: slower field
    reads on the simulator's hot path, and a misspelt field assigned without a word."""
    pool = RunPool(16, 4)
    assert not hasattr(pool, "__dict__")
    with pytest.raises(AttributeError):
        setattr(pool, "_loos", 1)  # noqa: B010 (a name no field has)
    pool._loose = 0  # a field is assigned as before


def test_every_method_is_the_parts_own() -> None:
    """Each method is defined once, in the pool or one part: two parts defining the same
    name would leave one silently unused (the first in the method resolution wins)."""
    seen: dict[str, str] = {}
    for cls in RunPool.__mro__[:-1]:
        for name, value in vars(cls).items():
            if callable(value) or isinstance(value, property):
                assert name not in seen or name.startswith("__"), (name, seen.get(name), cls)
                seen[name] = cls.__name__
    assert {"admit", "release", "pin", "unpin", "prefix_hit", "cache_full", "grow"} <= set(seen)
