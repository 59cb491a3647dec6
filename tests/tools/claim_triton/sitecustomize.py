"""Read at start-up by Python when this folder is on ``PYTHONPATH``: for
``tests/tools/vllm_release.py``'s checks only, never on a normal run. Every process they
start (pytest and the ``ttlctl`` commands its tests run) claims Triton for vLLM, as
:mod:`tests.tools.triton_claim` explains (the repository is on the path after this folder).
"""

from tests.tools.triton_claim import claim

claim()
