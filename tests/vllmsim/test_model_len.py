"""What the engine takes of a call longer than ``--max-model-len``, against vLLM's own code:
its prompt check (``InputProcessor._validate_prompt_len``) and the OpenAI server's output
cap (``get_max_tokens``), not our reading of them (:func:`replay.sim.fits_engine`)."""

from __future__ import annotations

import pytest
from vllm.entrypoints.serve.utils.api_utils import get_max_tokens
from vllm.exceptions import VLLMValidationError
from vllm.v1.engine.input_processor import InputProcessor

from replay.live.trimming import clip
from replay.scheduler import SimSchedulerConfig
from replay.sim import ReplayConfig, fits_engine
from replay.vllmsim.build import quiet_vllm, vllm_config
from replay.workload import Call

MODEL_LEN = 256


def _vllm_takes(prompt: int, output: int, engine: SimSchedulerConfig) -> int | None:
    """The output tokens vLLM serves a call with (None: it refuses the prompt)."""
    with quiet_vllm():
        config = vllm_config(engine, async_scheduling=False, plugin=False)
    # the prompt check alone, on vLLM's model config (the processor's tokenizer and
    # renderer are not needed for it)
    processor = InputProcessor.__new__(InputProcessor)
    processor.model_config = config.model_config
    processor.skip_prompt_length_check = False
    processor.supports_mm_inputs = False
    try:
        processor._validate_prompt_len(prompt, "decoder")
    except VLLMValidationError:
        return None
    return get_max_tokens(config.model_config.max_model_len, output, prompt, {})


@pytest.mark.parametrize(
    ("prompt", "output"),
    [(100, 50), (200, 56), (200, 57), (200, 100), (255, 1), (255, 9), (256, 1), (300, 4)],
)
def test_a_call_past_the_model_length_as_vllm_takes_it(prompt: int, output: int) -> None:
    engine = SimSchedulerConfig(kv_tokens=64 * 16, block_size=16, max_model_len=MODEL_LEN)
    served = _vllm_takes(prompt, output, engine)
    call, cut = fits_engine(Call(prompt, output, 0, "bash", 1.0), ReplayConfig(engine=engine))
    if served is None:
        assert call is None and not cut
        return
    assert call is not None
    assert (call.input_tokens, call.output_tokens) == (prompt, served)
    assert cut == (served < output)


@pytest.mark.parametrize(
    ("prompt", "output", "sent"),
    [(300, 40, (216, 40)), (100, 300, (100, 128)), (200, 256, (128, 128)), (100, 50, (100, 50))],
)
def test_truncate_clips_as_a_live_client_does(
    prompt: int, output: int, sent: tuple[int, int]
) -> None:
    """``--truncate``: the call is clipped to fit, the prompt shortened and an output that
    alone does not fit halved, exactly what a live run's client sends
    (:func:`replay.live.trimming.clip`): never refused for its length."""
    engine = SimSchedulerConfig(kv_tokens=64 * 16, block_size=16, max_model_len=MODEL_LEN)
    raw = Call(prompt, output, min(prompt, 90), "bash", 1.0)
    call, cut = fits_engine(raw, ReplayConfig(engine=engine, truncate=True))
    assert call is not None and (call.input_tokens, call.output_tokens) == sent
    assert cut == (sent != (prompt, output)) and call.reused_tokens <= call.input_tokens
    assert clip(raw, MODEL_LEN) == (*sent, cut)


def test_a_call_longer_than_the_cache_is_refused_without_truncate() -> None:
    """vLLM refuses to start with a model length its cache cannot hold, so it never meets
    such a call: the replay refuses it."""
    small = SimSchedulerConfig(kv_tokens=8 * 16, block_size=16, max_model_len=MODEL_LEN)
    assert fits_engine(Call(100, 50, 0, None, 0.0), ReplayConfig(engine=small)) == (None, False)
