"""vLLM told Triton is installed, for running a release's scheduler from its sources here.

From 0.34 vLLM's CPU platform refuses an x86 CPU without Triton when a ``VllmConfig`` is
built (``check_and_update_config``; 0.32 and 0.33 only warn), since its CPU model runner
needs triton-cpu's kernels. The checks of a release that cannot be installed here
(``tests/tools/vllm_release.py``, ``scheduler_probe.py``) run its scheduler, KV cache
manager and block pool with no model and no kernel, so the refusal does not apply to them.
vLLM reads the flag from ``vllm.triton_utils`` when it checks. Beware: a vLLM module
imported while the flag is claimed may import Triton because of it (the samplers' kernels
do); nothing these checks import does.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


def claim() -> bool | None:
    """Claim Triton for the rest of the process; what the flag was (None: this vLLM has no
    ``vllm.triton_utils``, and nothing is claimed)."""
    try:
        import vllm.triton_utils as triton_utils  # vLLM only when a check asks for it
    except ImportError:
        return None
    had = bool(triton_utils.HAS_TRITON)
    triton_utils.HAS_TRITON = True
    return had


@contextmanager
def claimed() -> Iterator[None]:
    """Triton claimed while the block runs (a config being built), then as it was."""
    had = claim()
    try:
        yield
    finally:
        if had is not None:
            import vllm.triton_utils as triton_utils

            triton_utils.HAS_TRITON = had
