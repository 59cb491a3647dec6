"""ttlctl/server/sse.py: the chunks of a streamed completion (profiler and live replay)."""

from __future__ import annotations

import itertools

import pytest

from ttlctl.server.sse import StreamError, chunks


def test_chunks_until_done_with_the_arrival_time_of_each_line() -> None:
    lines = [b"data: {\"a\": 1}\n", b"\n", b": keep-alive\n", b"data: [1, 2]\n",
             b"data:{\"b\": 2}\n", b"data: [DONE]\n", b"data: {\"c\": 3}\n"]  # fmt: skip
    clock = itertools.count(10.0).__next__
    assert list(chunks(lines, clock=clock)) == [(10.0, {"a": 1}), (14.0, {"b": 2})]


def test_chunks_raise_on_garbage_and_on_error_chunks() -> None:
    with pytest.raises(StreamError, match=r"^streamed something that is not JSON$"):
        list(chunks([b"data: {oops\n"]))
    long = "x " * 400
    err = f'data: {{"error": {{"message": "{long}"}}}}\n'.encode()
    with pytest.raises(StreamError) as info:
        list(chunks([err], error_chars=20))
    assert str(info.value) == "failed: " + ("x " * 10)[:20]
    with pytest.raises(StreamError, match=r"^failed: boom$"):
        list(chunks([b'data: {"error": "boom"}\n']))
    assert isinstance(StreamError("x"), ValueError)  # callers that catch ValueError still do
