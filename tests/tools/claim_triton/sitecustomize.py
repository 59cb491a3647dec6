"""Read at start-up by Python when this folder is on ``PYTHONPATH``: for
``tests/tools/vllm_release.py`` only, never on a normal run.

vLLM 0.34's CPU platform refuses, when a ``VllmConfig`` is built, an x86 CPU without
Triton (triton-cpu's kernels run its CPU model runner; 0.32 and 0.33 only warn). The
checks of a release read from its CUDA wheel's Python files run vLLM's scheduler, KV
cache manager and block pool with no model and no kernel, so the refusal does not apply
to them: vLLM is told Triton is there (it reads ``vllm.triton_utils.HAS_TRITON`` when it
checks). A vLLM without that module is left alone.
"""

try:
    import vllm.triton_utils as _triton_utils
except ImportError:
    pass
else:
    _triton_utils.HAS_TRITON = True
