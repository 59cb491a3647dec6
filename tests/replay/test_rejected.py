"""What a replay says of the calls its engine rejected (:mod:`replay.rejected`): how many
of how many, and for a tuner's held-back replays the same, said of them."""

from __future__ import annotations

from replay.rejected import held_back_line, rejected_line


def test_the_rejected_calls_of_all_the_calls() -> None:
    line = rejected_line(3, 1200)
    assert line.startswith("3 of 1,200 calls rejected (a prompt that reaches the model's length")
    assert line.endswith("--truncate clips them instead")


def test_the_held_back_replays_say_the_same_of_their_calls() -> None:
    line = held_back_line(2, 50)
    assert line.startswith(f"held-back replays: {rejected_line(2, 50)}; ")
    assert line.startswith("held-back replays: 2 of 50 calls rejected")
