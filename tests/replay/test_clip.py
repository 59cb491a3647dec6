"""``--truncate``'s rule (:func:`replay.clip.clip`): a call that fits is sent as it is; one
that does not has its prompt shortened to leave room for its output, its reused prefix
never longer than the prompt kept."""

from __future__ import annotations

from replay.clip import clip
from replay.workload import Call


def test_a_call_that_fills_the_limit_exactly_is_sent_as_it_is() -> None:
    call = Call(100, 28, 60, None, 0.0)
    assert clip(call, 128) == (call, False)


def test_a_clipped_prompt_keeps_no_longer_a_reused_prefix() -> None:
    kept, clipped = clip(Call(200, 10, 150, None, 0.0), 100)
    assert clipped
    assert (kept.input_tokens, kept.output_tokens, kept.reused_tokens) == (90, 10, 90)


def test_an_output_that_alone_reaches_the_limit_is_halved() -> None:
    kept, clipped = clip(Call(50, 300, 0, None, 0.0), 256)
    assert clipped and (kept.input_tokens, kept.output_tokens) == (50, 128)


def test_a_prompt_clipped_to_nothing_keeps_a_token() -> None:
    kept, clipped = clip(Call(50, 300, 0, None, 0.0), 1)
    assert clipped and (kept.input_tokens, kept.output_tokens) == (1, 1)
