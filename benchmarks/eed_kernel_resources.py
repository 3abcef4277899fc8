"""Registers and spilled bytes of every EED kernel on CUDA, per layout, without a GPU.

The step's Triton kernels (``stimuli.eed_triton``) are compiled for a CUDA architecture (default sm_90, the
H100's) exactly as a step launches them -- ``Stepper._launch`` is where they start, so a step with and one
without the limiter is run here with a launcher that compiles instead -- and the machine code's resource
use is read from the machine code with the ``cuobjdump`` that ships with Triton. Registers per thread bound how many warps an SM
keeps in flight (its occupancy); local stores and loads are values the compiler spilled out of registers,
slow off-chip traffic on every use. A layout whose kernels spill cannot reach the bandwidth limit; this shows it before a
device is lent (the profile of a device run gives the measured occupancy).

    python benchmarks/eed_kernel_resources.py                  # every layout, sm_90
    python benchmarks/eed_kernel_resources.py --layouts rows-fused --arch 80
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile

SM_REGISTERS, SM_WARPS, REGISTER_GRANULE = 65536, 64, 8  # per SM on sm_80 and sm_90; registers per thread rounded up


def cuobjdump() -> str:
    import triton

    path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    if not os.access(path, os.X_OK):
        raise SystemExit(f"Triton's CUDA backend has no cuobjdump at {path}: this needs Triton's NVIDIA build")
    return path


def compiled_resources(kernel, args: tuple, meta: dict, arch: int) -> dict:
    """Registers per thread, the occupancy they allow, and the machine code's instructions, global loads and
    spill instructions (local stores and loads; ``-res-usage`` does not count spills) of ``kernel`` compiled for sm_``arch`` with these launch
    arguments: tensors as float32 pointers, ints as i32, floats as fp32, keywords as compile-time constants."""
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    meta = dict(meta)
    num_warps = meta.pop("num_warps", 4)
    given = dict(zip([p.name for p in kernel.params if not p.is_constexpr], args))
    signature = {}
    for param in kernel.params:
        value = meta.get(param.name) if param.is_constexpr else given[param.name]
        signature[param.name] = ("constexpr" if param.is_constexpr else "*fp32" if isinstance(value, torch.Tensor)
                                 else "i32" if isinstance(value, int) else "fp32")
    source = ASTSource(fn=kernel, signature=signature, constexprs={k: meta[k] for k in meta})
    binary = triton.compile(source, target=GPUTarget("cuda", arch, 32), options={"num_warps": num_warps})
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(binary.asm["cubin"])
        cubin.flush()
        usage, sass = (subprocess.run([cuobjdump(), flag, cubin.name], capture_output=True, text=True,
                                      check=True).stdout for flag in ("-res-usage", "-sass"))
    registers = int(re.search(r"REG:(\d+)", usage).group(1))
    per_warp = -(-registers // REGISTER_GRANULE) * REGISTER_GRANULE * 32
    programs = SM_REGISTERS // (per_warp * num_warps)
    opcodes = re.findall(r"^\s+/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", sass, flags=re.MULTILINE)
    return {"kernel": kernel.__name__, "constants": {k: meta[k] for k in meta}, "num_warps": num_warps,
            "registers": registers, "occupancy": min(SM_WARPS, programs * num_warps) / SM_WARPS,
            "instructions": len(opcodes), "global_loads": opcodes.count("LDG"),
            "spills": opcodes.count("STL") + opcodes.count("LDL")}


def layout_resources(layout: str, arch: int = 90, size: int = 224) -> list[dict]:
    """``compiled_resources`` of every kernel one step of ``layout`` launches at size x size, limiter on and off."""
    import torch

    from stimuli.eed_scheme import EEDParams
    from stimuli.eed_triton import Stepper

    found: dict[tuple, dict] = {}

    class Compiling(Stepper):
        def _launch(self, kernel, grid, *args, **meta):
            key = (kernel.__name__, tuple(sorted(meta.items())))
            if key not in found:
                found[key] = compiled_resources(kernel, args, meta, arch)

    u = torch.zeros((1, 3, size, size))
    for limit in (True, False):
        bounds = (u.amin(dim=(2, 3), keepdim=True), u.amax(dim=(2, 3), keepdim=True)) if limit else None
        Compiling(size, size, EEDParams(limit=limit), "cpu", layout)(u, 1, bounds)
    return list(found.values())


def main() -> None:
    from stimuli.eed_triton import DEFAULT_VARIANT, VARIANTS

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layouts", default=",".join(VARIANTS), help="comma-separated names from VARIANTS")
    parser.add_argument("--arch", type=int, default=90, help="CUDA compute capability without the dot (90: H100)")
    args = parser.parse_args()
    print(f"EED kernels compiled for sm_{args.arch} (default layout: {DEFAULT_VARIANT})")
    print("registers per thread, the occupancy they allow, and in the machine code: instructions, global loads"
          " and spill instructions (local stores and loads)")
    print(f"{'layout':12s} {'kernel':27s} {'warps':>5s} {'registers':>9s} {'occupancy':>9s} {'instr.':>6s} "
          f"{'loads':>5s} {'spills':>6s}  constants")
    for layout in args.layouts.split(","):
        for row in layout_resources(layout, args.arch):
            constants = ", ".join(f"{k}={v}" for k, v in row["constants"].items())
            print(f"{layout:12s} {row['kernel']:27s} {row['num_warps']:5d} {row['registers']:9d} "
                  f"{row['occupancy']:9.0%} {row['instructions']:6d} {row['global_loads']:5d} {row['spills']:6d}  "
                  f"{constants}")


if __name__ == "__main__":
    main()
