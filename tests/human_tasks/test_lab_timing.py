"""Frame arithmetic of the lab runner (and the web task's documented rule), checked by hand."""

import pytest

from human_tasks.timing import (RefreshRateError, dropped_frames, ms_to_frames, phase_frames, settle_refresh_rate,
                                stable_refresh_rate)
from cuebench.trials import standard_timing


@pytest.mark.parametrize("ms, hz, frames, achieved", [
    (200, 60, 12, 200.0),           # 200 * 60 / 1000 = 12.0
    (300, 60, 18, 300.0),
    (50, 60, 3, 50.0),
    (25, 60, 2, 100 / 3),           # 1.5 frames: halves round up
    (24, 60, 1, 50 / 3),            # 1.44 -> 1
    (200, 120, 24, 200.0),
    (10, 120, 1, 25 / 3),           # 1.2 -> 1
    (800, 120, 96, 800.0),
    (200, 144, 29, 29000 / 144),    # 28.8 -> 29 frames = 201.39 ms
    (300, 144, 43, 43000 / 144),    # 43.2 -> 43 = 298.61 ms
    (2000, 144, 288, 2000.0),
    (1, 144, 1, 1000 / 144),        # a non-zero phase gets at least one frame
])
def test_ms_to_frames_at_60_120_144_hz(ms, hz, frames, achieved):
    count = ms_to_frames(ms, hz)
    assert count.frames == frames
    assert count.achieved_ms == pytest.approx(achieved)
    assert count.error_ms == pytest.approx(achieved - ms)


def test_skipped_phase_is_zero_frames_and_bad_input_is_refused():
    assert ms_to_frames(None, 60).frames == 0
    assert ms_to_frames(0, 144).error_ms == 0
    with pytest.raises(ValueError, match="refresh rate"):
        ms_to_frames(200, 0)
    with pytest.raises(ValueError, match=">= 0 ms"):
        ms_to_frames(-5, 60)


def test_phase_frames_of_the_reference_protocols_at_144_hz():
    burgert = phase_frames(standard_timing("classify"), 144)  # 300 / 200 / 200 ms
    assert [burgert[p].frames for p in ("fixation", "stimulus", "mask", "response_window")] == [43, 29, 29, 0]
    dist = phase_frames(standard_timing("oddity"), 144)  # 800 ms triplet, 2000 ms window, no mask
    assert (dist["stimulus"].frames, dist["mask"].frames, dist["response_window"].frames) == (115, 0, 288)
    assert "29 frames = 201.4 ms (+1.4 ms)" in burgert["stimulus"].describe()


def test_dropped_frames_counts_intervals_over_1_2_periods():
    period = 1 / 60
    intervals = [period, 1.19 * period, 1.21 * period, 2 * period, 0.5 * period]
    assert dropped_frames(intervals, 60) == 2
    assert dropped_frames([], 144) == 0


def test_refresh_rate_must_be_measured_stably_or_declared():
    assert stable_refresh_rate([59.95, 60.01, 60.0]) == pytest.approx(60.0)
    with pytest.raises(RefreshRateError, match="could not be measured"):
        stable_refresh_rate([60.0, None, 60.0])
    with pytest.raises(RefreshRateError, match="unstable"):
        stable_refresh_rate([60.0, 75.0, 60.0])
    with pytest.raises(RefreshRateError, match="not a display's"):
        stable_refresh_rate([1043.0, 1040.0, 1041.0])  # flips without vsync (e.g. Xvfb)
    assert settle_refresh_rate([None, 294.0, None], 60) == (60.0, "declared")
    assert settle_refresh_rate([143.9, 144.0, 144.0], None) == (144.0, "measured")
    assert settle_refresh_rate([119.9, 120.0, 120.0], 120) == (120.0, "declared")
    with pytest.raises(RefreshRateError, match="measures stably at 144.0 Hz"):
        settle_refresh_rate([144.0, 144.0, 144.0], 60)
    # a simulated run on a virtual display: free-running flips measure "stably" fast; the declared rate counts
    assert settle_refresh_rate([511.5, 511.4, 511.6], 60, simulated=True) == (60.0, "declared")
    with pytest.raises(RefreshRateError, match="--refresh-hz 5000"):
        settle_refresh_rate([None], 5000)
