"""The log axes' tick values (ttlctl.report.ticks): always some, always on the axis."""

from __future__ import annotations

from ttlctl.report.ticks import log_ticks


def test_an_axis_too_narrow_for_two_ticks_keeps_one_within_it() -> None:
    """Regression (a second reader's find): a tool whose pauses all lay at 2.37 s drew its
    pause axis from 2.37 to 2.417 s, too narrow for two ticks the asked share apart:
    log_ticks returned none and the axis read only "0"."""
    for lo, hi in ((2.37, 2.417), (2.37, 2.37), (1e-9, 1.02e-9)):
        ticks = log_ticks(lo, hi, 6.5)
        assert len(ticks) == 1 and lo <= ticks[0] <= hi, (lo, hi, ticks)


def test_wide_and_narrow_axes_get_several_ticks_in_order_on_the_axis() -> None:
    for lo, hi in ((180.0, 780.0), (0.01, 1.0), (69.0, 95.0), (1e-300, 1e300)):
        ticks = log_ticks(lo, hi, 0.12)
        assert len(ticks) >= 2 and ticks == sorted(ticks), (lo, hi, ticks)
        assert all(lo <= t <= hi for t in ticks), (lo, hi, ticks)
