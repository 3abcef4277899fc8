"""benchmarks/gpu_suite.sh's summary table: each goal judged from the benchmarks' JSON results, and a step that
ran past its cap or never ran shown as such rather than as a number."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

from conftest import REPO

TABLE = REPO / "benchmarks" / "gpu_suite_table.py"


def test_the_table_judges_each_goal_and_names_what_did_not_finish(tmp_path):
    (tmp_path / "status.txt").write_text("pytest 1 50\need 0 150\neval 0 120\nseg 124 60\n")
    (tmp_path / "pytest.xml").write_text('<testsuites><testsuite name="pytest" tests="6" skipped="0" failures="1" '
                                         'errors="0"/></testsuites>')
    # 1,280 x 16,384 projected at 48 s from 4,096 timed steps; the reference at 40 image-steps/s would take
    # 1280 * 16384 / 40 = 524,288 s, 10,923x longer; agreement within 1e-3 with the limiter on, not off
    (tmp_path / "eed.json").write_text(json.dumps({
        "device": "cuda", "reference_image_steps_per_s": 40.0, "agree_steps": 512, "max_abs_difference": 4e-4,
        "max_abs_difference_no_limit": 2e-3,
        "full_run": {"images": 1280, "steps": 16384, "timed_steps": 4096, "timed_seconds": 12.0, "seconds": 48.0},
        # kernel layouts at 1,280 images: the goal per step is 60 s / 16,384 = 3.66 ms; tiles 38.4 / rows 3.2 = 12.0x
        "batch": 1280, "default_variant": "rows", "fastest_variant": "rows",
        "variants": {"tiles": {"ms_per_step": 38.4, "max_abs_difference": 6e-4, "max_abs_difference_no_limit": 4e-4},
                     "rows": {"ms_per_step": 3.2, "max_abs_difference": 6e-4, "max_abs_difference_no_limit": 4e-4},
                     "rows-fused": {"ms_per_step": 3.5, "max_abs_difference": 2e-3,
                                    "max_abs_difference_no_limit": 4e-4},
                     "rows-wide": {"ms_per_step": 3.3}, "rows-long": {"error": "CompilationError: at 12:4"}}}))
    (tmp_path / "eval.json").write_text(json.dumps({"device": "cuda", "ours_images_per_s": 4500.0,
                                                    "bare_images_per_s": 5000.0, "ratio": 0.9}))
    out = subprocess.run([sys.executable, str(TABLE), str(tmp_path)], capture_output=True, text=True, check=True)
    rows = {line.split("|")[0].strip(): [cell.strip() for cell in line.split("|")] for line in out.stdout.splitlines()
            if "|" in line}
    assert rows["pytest -m gpu"][2:] == ["5 passed", "0 skipped", "1 failed", "all pass, none skipped", "FAIL"]
    eed = rows["EED 1280 x 16384 steps"]
    assert eed[1:] == ["cuda", "48.0 s (from 4096 steps)", "524288 s (reference, projected)", "10922.7x", "<= 60 s",
                       "pass"]
    assert rows["EED agreement, limiter on"][-1] == "pass"
    assert rows["EED agreement, limiter off"][-1] == "FAIL"
    assert rows["EED layout tiles"][2:] == ["38.40 ms/step", "38.40 ms/step (tiles)", "1.0x",
                                            "<= 3.66 ms/step, agreement <= 0.001", "FAIL"]
    assert rows["EED layout rows (fastest, default)"][2:5] == ["3.20 ms/step", "38.40 ms/step (tiles)", "12.0x"]
    assert rows["EED layout rows (fastest, default)"][-1] == "pass"
    assert rows["EED layout rows-fused"][-1] == "FAIL"  # fast enough, but not within 1e-3 of the reference
    assert rows["EED layout rows-wide"][-1] == "FAIL (agreement not run)"
    assert rows["EED layout rows-long"][-1] == "FAILED: CompilationError: at 12:4"
    assert rows["cuebench eval (cache)"][2:] == ["4500.0 img/s", "5000.0 img/s", "0.90x", ">= 0.9x bare", "pass"]
    assert rows["segmentation eval"][-1] == "TIMEOUT (cap 60 s)"
    assert rows["cuebench benchmark, cold"][-1] == "not run"


def test_the_profile_summary_counts_launches_occupancy_and_bytes():
    """A hand-made trace of two steps: three kernel launches, two kernels of 30 and 10 us at 50% and 90% estimated
    occupancy (time-weighted: (30 * 50 + 10 * 90) / 40 = 60%), one 4 MB host-to-device copy; 8 MB the least a step
    moves, so 16 MB in the kernels' 40 us is 400 GB/s."""
    spec = importlib.util.spec_from_file_location("torch_profile", REPO / "benchmarks" / "torch_profile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    events = [{"cat": "cuda_runtime", "name": "cudaLaunchKernel", "dur": 5}] * 2 + [
        {"cat": "cuda_runtime", "name": "cuLaunchKernel", "dur": 5},
        {"cat": "cuda_runtime", "name": "cudaStreamSynchronize", "dur": 5},
        {"cat": "kernel", "name": "eed_step", "dur": 30, "args": {"grid": [8, 1, 1], "est. achieved occupancy %": 50}},
        {"cat": "kernel", "name": "limiter", "dur": 10, "args": {"est. achieved occupancy %": 90}},
        {"cat": "gpu_memcpy", "name": "Memcpy HtoD", "dur": 100, "args": {"bytes": 4_000_000}},
        {"cat": "cpu_op", "name": "aten::copy_", "dur": 7}]
    text = module.summarize(events, wall_s=0.002, steps=2, min_bytes_per_step=8_000_000)
    assert "wall-clock time under the profiler: 2.0 ms (1.000 ms per step)" in text
    assert "kernel launches: 3 (1.5 per step); kernels run on the device: 2; torch operations on the host: 1" in text
    assert "host<->device copies: 1, 4.0 MB in 0.10 ms" in text
    assert "estimated achieved occupancy, time-weighted: 60%" in text
    assert "least bytes a step must move: 8.0 MB; at the kernels' time that is 400 GB/s" in text
    assert text.index("eed_step, grid [8, 1, 1]") < text.index("limiter")
