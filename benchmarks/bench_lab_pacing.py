"""Frame pacing without vsync: the lab runner's FramePacer against a naive wait-a-period loop.

Where flips are not tied to a display (vsync off, Xvfb), the runner keeps them on a
one-period schedule (``human_tasks.lab.display.FramePacer``). The baseline sleeps one
refresh period after every flip, the obvious alternative, which drifts by each frame's
drawing and flipping time. Both draw a 224 px image for the same number of frames;
printed: how far a 200 ms (12-frame at 60 Hz) phase lands from 200 ms, the share of
intervals within 1.2 periods, and the ratio of the mean absolute phase errors.

    xvfb-run -a .venv/bin/python benchmarks/bench_lab_pacing.py [--hz 60] [--phases 40]
"""

from __future__ import annotations

import argparse

import numpy as np


def run(hz: float, phases: int) -> None:
    from psychopy import core, visual

    from human_tasks.lab.display import FramePacer, Refresh
    from human_tasks.timing import dropped_frames, ms_to_frames

    win = visual.Window(size=(800, 600), units="pix", checkTiming=False)
    image = visual.ImageStim(win, image=np.random.default_rng(0).uniform(-1, 1, (224, 224, 3)), size=(224, 224))
    frames = ms_to_frames(200, hz).frames
    period = 1.0 / hz
    pacer = FramePacer(win, Refresh(hz, "declared", (), float("inf"), "software"))

    def paced() -> float:
        return pacer.flip()

    def naive() -> float:
        win.flip()
        core.wait(period, hogCPUperiod=min(period, 0.004))
        return core.getTime()

    results = {}
    for name, flip in (("FramePacer", paced), ("wait-a-period", naive)):
        errors, intervals = [], []
        for _ in range(phases):
            stamps = []
            for _ in range(frames + 1):  # the flip after the phase marks its end
                image.draw()
                stamps.append(flip())
            errors.append(abs(1000 * (stamps[-1] - stamps[0]) - 200))
            intervals.extend(np.diff(stamps))
        on_time = 1 - dropped_frames(intervals, hz) / len(intervals)
        results[name] = float(np.mean(errors))
        print(f"{name:>14}: 200 ms phase at {hz:g} Hz, mean |error| {np.mean(errors):6.2f} ms, "
              f"max {np.max(errors):6.2f} ms, {100 * on_time:5.1f} % of intervals within 1.2 periods")
    win.close()
    print(f"mean phase error, wait-a-period / FramePacer: {results['wait-a-period'] / results['FramePacer']:.2f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hz", type=float, default=60.0)
    parser.add_argument("--phases", type=int, default=40)
    args = parser.parse_args()
    run(args.hz, args.phases)
