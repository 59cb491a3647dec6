"""Integer maths the simulator shares (vLLM keeps the same in ``vllm/utils/math_utils.py``)."""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    """⌈a / b⌉ for integers (``b`` > 0), exactly, as vLLM's ``cdiv``: the blocks that
    ``a`` tokens fill, ``b`` to a block."""
    return -(a // -b)
