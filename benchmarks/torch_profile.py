"""``--profile`` of the benchmarks: one extra, untimed pass of a loop under ``torch.profiler``,
summarised as what a short device loan has to bring back (issue 52): kernel launches (and
launches per step), the kernels that take the time with their grid, registers and the
profiler's estimated occupancy, bytes copied between host and device, and -- where the caller
knows the least data a step must move -- the bandwidth that implies.

The profiler's own overhead slows the pass down, so it is never one of the timed runs.
Work outside torch (the numba kernels of EED on a CPU) is invisible to it: there the summary
shows only the torch operations around it.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernelExC", "cudaGraphLaunch")


def summarize(events: list[dict], wall_s: float, steps: int | None = None, min_bytes_per_step: int | None = None,
              top: int = 8) -> str:
    """The text summary of a Chrome trace's events (``torch.profiler``'s export) over ``wall_s`` seconds."""
    kernels = [e for e in events if e.get("cat") == "kernel"]
    launches = [e for e in events if e.get("cat") == "cuda_runtime" and e.get("name") in LAUNCH_CALLS]
    copies = [e for e in events if e.get("cat") == "gpu_memcpy"]
    ops = [e for e in events if e.get("cat") == "cpu_op"]
    lines = [f"wall-clock time under the profiler: {wall_s * 1e3:.1f} ms"
             + (f" ({wall_s / steps * 1e3:.3f} ms per step)" if steps else "")]
    per_step = f" ({len(launches) / steps:.1f} per step)" if steps and launches else ""
    lines.append(f"kernel launches: {len(launches)}{per_step}; kernels run on the device: {len(kernels)}; "
                 f"torch operations on the host: {len(ops)}")
    if copies:
        moved = sum(e.get("args", {}).get("bytes", 0) for e in copies)
        seconds = sum(e.get("dur", 0) for e in copies) / 1e6
        lines.append(f"host<->device copies: {len(copies)}, {moved / 1e6:.1f} MB in {seconds * 1e3:.2f} ms")
    busy_s = sum(e.get("dur", 0) for e in kernels) / 1e6
    if kernels:
        lines.append(f"device busy in kernels: {busy_s * 1e3:.2f} ms"
                     + (f" ({busy_s / steps * 1e3:.3f} ms per step)" if steps else ""))
        occupancy = [(e["dur"], e["args"]["est. achieved occupancy %"]) for e in kernels
                     if "est. achieved occupancy %" in e.get("args", {})]
        if occupancy:
            weight = sum(d for d, _ in occupancy)
            lines.append(f"estimated achieved occupancy, time-weighted: {sum(d * o for d, o in occupancy) / weight:.0f}%")
    if steps and min_bytes_per_step:
        lines.append(f"least bytes a step must move: {min_bytes_per_step / 1e6:.1f} MB"
                     + (f"; at the kernels' time that is {min_bytes_per_step * steps / busy_s / 1e9:.0f} GB/s"
                        if busy_s else ""))
    timed = kernels or ops
    by_name: dict[str, list[dict]] = defaultdict(list)
    for event in timed:
        by_name[event["name"]].append(event)
    ranked = sorted(by_name.items(), key=lambda item: -sum(e.get("dur", 0) for e in item[1]))[:top]
    lines.append(f"top {'kernels' if kernels else 'host operations'} by total time:")
    for name, group in ranked:
        args = group[0].get("args", {})
        shape = "".join(f", {key} {args[key]}" for key in ("grid", "block", "registers per thread", "shared memory",
                                                            "est. achieved occupancy %") if key in args)
        total_ms = sum(e.get("dur", 0) for e in group) / 1e3
        lines.append(f"  {total_ms:9.2f} ms  {len(group):6d} x  {name[:90]}{shape}")
    return "\n".join(lines)


@contextmanager
def profiled(path: str | None, device: str, label: str, steps: int | None = None,
             min_bytes_per_step: int | None = None):
    """Run the block under ``torch.profiler`` (CUDA activities on a CUDA device) and print and write
    (to ``path``) its summary; without a path the block runs plainly."""
    if path is None:
        yield
        return
    import torch
    from torch.profiler import ProfilerActivity, profile

    cuda = device.startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        yield
        if cuda:
            torch.cuda.synchronize()
        wall_s = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(trace))
        events = json.loads(trace.read_text())["traceEvents"]
    text = f"profile of {label} on {device}\n" + summarize(events, wall_s, steps, min_bytes_per_step)
    print(text)
    Path(path).write_text(text + "\n", encoding="utf-8")
