"""The one summary table of ``benchmarks/gpu_suite.sh``: each benchmark's JSON result (and the
pytest junit file) against the goal of issue 52, with how each step ended.

A step that ran past its time cap or failed shows that instead of a number, so a short device
loan always ends with a full table of what was and was not measured.

    python benchmarks/gpu_suite_table.py RESULTS_DIR
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

EED_SECONDS_GOAL = 60.0  # 1,280 images x 16,384 steps at 224x224 on one H100
AGREEMENT_GOAL = 1e-3  # max |batched - reference| after 512 steps, 0-255
RATIO_GOAL = 0.9  # share of the bare model's speed the whole path keeps


def step_states(results: Path) -> dict[str, str]:
    """``name -> 'ok' | 'TIMEOUT (cap N s)' | 'FAILED (exit N)'`` from the suite's status file."""
    states = {}
    for line in (results / "status.txt").read_text().splitlines():
        name, rc, cap = line.split()
        states[name] = "ok" if rc == "0" else f"TIMEOUT (cap {cap} s)" if rc in ("124", "137") else f"FAILED (exit {rc})"
    return states


def load(results: Path, name: str) -> dict | None:
    path = results / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def verdict(passed: bool) -> str:
    return "pass" if passed else "FAIL"


def rows(results: Path) -> list[list[str]]:
    states = step_states(results)
    table = []

    def missing(name: str, label: str, goal: str) -> None:
        table.append([label, "-", "-", "-", "-", goal, states.get(name, "not run")])

    junit = results / "pytest.xml"
    if junit.is_file():
        suite = ET.parse(junit).getroot()
        suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
        tests, skipped = int(suite.get("tests")), int(suite.get("skipped"))
        bad = int(suite.get("failures")) + int(suite.get("errors"))
        table.append(["pytest -m gpu", "-", f"{tests - skipped - bad} passed", f"{skipped} skipped", f"{bad} failed",
                      "all pass, none skipped", verdict(bad == 0 and skipped == 0 and tests > 0)])
    else:
        missing("pytest", "pytest -m gpu", "all pass, none skipped")

    eed = load(results, "eed")
    if eed and "full_run" in eed:
        full = eed["full_run"]
        reference_s = full["images"] * full["steps"] / eed["reference_image_steps_per_s"]
        projected = "" if full["timed_steps"] == full["steps"] else f" (from {full['timed_steps']} steps)"
        table.append([f"EED {full['images']} x {full['steps']} steps", eed["device"],
                      f"{full['seconds']:.1f} s{projected}", f"{reference_s:.0f} s (reference, projected)",
                      f"{reference_s / full['seconds']:.1f}x", f"<= {EED_SECONDS_GOAL:.0f} s",
                      verdict(full["seconds"] <= EED_SECONDS_GOAL)])
    else:
        missing("eed", "EED full run", f"<= {EED_SECONDS_GOAL:.0f} s")
    if eed and "max_abs_difference" in eed:
        for key, limiter in (("max_abs_difference", "on"), ("max_abs_difference_no_limit", "off")):
            if key in eed:
                table.append([f"EED agreement, limiter {limiter}", eed["device"], f"{eed[key]:.1e}", "reference",
                              "-", f"<= {AGREEMENT_GOAL:g} after {eed['agree_steps']} steps",
                              verdict(eed[key] <= AGREEMENT_GOAL)])
    else:
        missing("eed", "EED agreement", f"<= {AGREEMENT_GOAL:g}")
    table.extend(layout_rows(eed or {}))

    for name, label in (("eval", "cuebench eval (cache)"), ("seg", "segmentation eval"),
                        ("scorecard", "cuebench benchmark, cold")):
        found = load(results, name)
        if found is None:
            missing(name, label, f">= {RATIO_GOAL}x bare")
            continue
        if name == "scorecard":
            ours, bare = f"{found['cold_answering_s']:.1f} s", f"{found['bare_s']:.1f} s"
        else:
            ours, bare = f"{found['ours_images_per_s']:.1f} img/s", f"{found['bare_images_per_s']:.1f} img/s"
        table.append([label, found["device"], ours, bare, f"{found['ratio']:.2f}x", f">= {RATIO_GOAL}x bare",
                      verdict(found["ratio"] >= RATIO_GOAL)])
    return table


def layout_rows(eed: dict) -> list[list[str]]:
    """One row per layout of the CUDA kernels that ``bench_eed.py --variants`` timed: ms per step of its batch
    against the 2-D ``tiles`` layout, judged by the full run's goal per step (scaled to the batch) and by its
    agreement with the reference; the fastest and the default are named."""
    table = []
    timed = eed.get("variants", {})
    baseline = timed.get("tiles", {}).get("ms_per_step")
    goal_ms = 1e3 * EED_SECONDS_GOAL / 16384 * eed.get("batch", 1280) / 1280
    for name, layout in timed.items():
        if "error" in layout:
            table.append([f"EED layout {name}", eed["device"], "-", "-", "-", "runs", f"FAILED: {layout['error'][:60]}"])
            continue
        marks = [mark for mark, key in (("fastest", "fastest_variant"), ("default", "default_variant"))
                 if eed.get(key) == name]
        agree = [layout.get(k) for k in ("max_abs_difference", "max_abs_difference_no_limit")]
        agreed = all(a is not None and a <= AGREEMENT_GOAL for a in agree)
        table.append([f"EED layout {name}" + (f" ({', '.join(marks)})" if marks else ""), eed["device"],
                      f"{layout['ms_per_step']:.2f} ms/step",
                      f"{baseline:.2f} ms/step (tiles)" if baseline else "-",
                      f"{baseline / layout['ms_per_step']:.1f}x" if baseline else "-",
                      f"<= {goal_ms:.2f} ms/step, agreement <= {AGREEMENT_GOAL:g}",
                      verdict(layout["ms_per_step"] <= goal_ms and agreed)
                      + ("" if agree[0] is not None else " (agreement not run)")])
    return table


def format_table(table: list[list[str]]) -> str:
    header = ["benchmark", "device", "ours", "baseline", "ratio", "goal", "result"]
    widths = [max(len(row[i]) for row in [header, *table]) for i in range(len(header))]
    lines = [" | ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in [header, *table]]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def main() -> None:
    print(format_table(rows(Path(sys.argv[1]))))


if __name__ == "__main__":
    main()
