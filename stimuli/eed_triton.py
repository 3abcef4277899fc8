"""EED steps on CUDA as Triton kernels.

The batched torch form reads and writes a dozen whole-batch temporaries per step. Here a
step is four kernels, each keeping its intermediate values in registers and reading its
neighbourhood straight from the previous kernel's output:

1. tensor: pre-smoothing and the colour structure tensor on the corner grid;
2. weights: tensorblur, diffusion tensor and the delta stencil's corner weights;
3. rooms (limiter only): each pixel's Zalesak factors;
4. update: the eight fluxes, limited, into a fresh image buffer.

Two layouts of the same kernels, in several tile shapes (``VARIANTS``; ``DEFAULT_VARIANT`` is
the one ``Stepper`` uses; ``benchmarks/bench_eed.py --variants`` times them side by side):

- ``tiles``: each program computes a 2-D tile and reads every output's whole window from
  memory (36 loads per corner and colour for the Gaussian, 25 per tensor entry for the
  tensorblur): simple, but bound by load instructions, and at 16 x 64 outputs the tensor and
  weights kernels spill registers (``benchmarks/eed_kernel_resources.py``).
- ``rows``: each program walks down a strip of columns of one image, one row at a time,
  all colours together. A Gaussian's row pass is read from memory (a row's neighbours
  along it cannot be shifted in registers) but its column pass comes from the rows kept in
  registers as the walk goes down (loop-carried values): 6 loads per corner and colour for
  the pre-smoothing, 5 per tensor entry for the tensorblur, and the corner weights read
  once per row for all three colours. Only the rows a program's outputs need are read: a
  strip's halo of 5 rows is read twice, by it and by its neighbour. With ``fused``, the
  limiter's rooms are made inside the update instead of passing through memory.

A step cannot be carried further in one launch: one step of a pixel depends on pixels up
to 7 away (Gaussian 2, corner 1, tensorblur 2, stencil 1, limiter 1), and each stage's
neighbours along a row must come from memory. Symmetric padding is index mirroring, as
``stimuli.eed.symmetric_index``. The scheme is the one documented in ``stimuli.eed``;
``TRITON_INTERPRET=1`` runs these kernels on the CPU (tests).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import triton
import triton.language as tl

from .eed_scheme import EEDError, EEDParams, gaussian_kernel_1d, symmetric_index

BYTES_PER_PIXEL = 4 * (3 + 3 + 3 + 4 + 6)
"""Device memory per image pixel: image and next image, tensor, corner weights, rooms."""


@dataclass(frozen=True)
class Variant:
    """A layout of the step's kernels: ``tiles`` (``rows`` x ``cols`` tiles) or ``rows`` (strips of ``cols``
    columns, ``rows`` rows per program), with ``num_warps`` warps per program; ``fused``: the limiter's rooms
    made inside the update (``_fused_update_rows_kernel``) instead of in a kernel of their own."""

    layout: str
    rows: int
    cols: int
    num_warps: int = 4
    fused: bool = False


VARIANTS = {
    "tiles": Variant("tiles", 16, 64),
    "tiles-small": Variant("tiles", 4, 32),
    "rows": Variant("rows", 32, 128),
    "rows-long": Variant("rows", 75, 128),
    "rows-wide": Variant("rows", 32, 256, 8),
    "rows-2x": Variant("rows", 32, 256, 4),
    "rows-fused": Variant("rows", 32, 128, fused=True),
}
DEFAULT_VARIANT = "rows"
"""The layout ``Stepper`` uses unless told otherwise (and so ``cuebench`` on CUDA): to be the fastest that
``benchmarks/bench_eed.py --variants`` measures. Not yet measured on a GPU; chosen from the compiled kernels
(``benchmarks/eed_kernel_resources.py``, sm_90): no spills, 32-80 registers, about 1,600 instructions per pixel
and step, against 42 float planes of memory traffic per step; ``rows-fused`` moves 26 planes but needs about
2,400 instructions (its rooms made three times over), ``tiles`` spills."""


@triton.jit
def _mirror(i, n):
    """Index into an axis of ``n`` samples padded symmetrically (edge sample repeated)."""
    i = tl.where(i < 0, -i - 1, i)
    return tl.where(i >= n, 2 * n - 1 - i, i)


@triton.jit
def _tile(t, rows, cols, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """Tile ``t``'s (row, column) indices over a rows x cols grid, and their mask."""
    tiles_c = tl.cdiv(cols, BLOCK_C)
    r = (t // tiles_c) * BLOCK_R + tl.arange(0, BLOCK_R)[:, None]
    c = (t % tiles_c) * BLOCK_C + tl.arange(0, BLOCK_C)[None, :]
    return r, c, (r < rows) & (c < cols)


@triton.jit
def _corner_tensor(s_tl, s_tr, s_bl, s_br, alpha, inv_h):
    """One colour's (A, B, C) at a corner from the smoothed pixels around it (top/bottom, left/right): their
    differences and the WWW (2013) averaging."""
    x1 = (s_tl - s_tr) * inv_h
    x2 = (s_bl - s_br) * inv_h
    y1 = (s_tl - s_bl) * inv_h
    y2 = (s_tr - s_br) * inv_h
    A = (1 - alpha) / 2 * (x1 * x1 + x2 * x2) + alpha * x1 * x2
    B = 0.25 * (x1 + x2) * (y1 + y2)
    C = (1 - alpha) / 2 * (y1 * y1 + y2 * y2) + alpha * y1 * y2
    return A, B, C


@triton.jit
def _stencil_weights(A, B, C, alpha, contrast, k):
    """The diffusion tensor g(mu) along the (blurred) tensor's eigenvectors (identity where the discriminant
    is below 1e-6), then the delta stencil's corner weights times k = tau / 2h^2: along rows, along columns,
    main and anti diagonal."""
    D = tl.sqrt(4 * B * B + (A - C) * (A - C))
    flat = D < 1e-6
    q1 = (A + C - D) / (2 * contrast)
    q2 = (A + C + D) / (2 * contrast)
    g1 = 1 / tl.sqrt(1 + q1 * q1)
    g2 = 1 / tl.sqrt(1 + q2 * q2)
    Dsafe = tl.where(flat, 1.0, D)
    At = tl.where(flat, 1.0, ((A - C + D) * g2 - (A - C - D) * g1) / (2 * Dsafe))
    Ct = tl.where(flat, 1.0, ((C - A + D) * g2 - (C - A - D) * g1) / (2 * Dsafe))
    Bt = tl.where(flat, 0.0, B * (g2 - g1) / Dsafe)
    delta = alpha * (At + Ct) + (1 - 2 * alpha) * tl.abs(Bt)
    return k * (At - delta), k * (Ct - delta), k * (delta + Bt), k * (delta - Bt)


@triton.jit
def _rooms(centre, gain, loss, lo, hi):
    """Zalesak's factors: how much of its inflow (``gain``) and outflow (``loss``) a pixel can take and stay
    inside [lo, hi]."""
    room_up = tl.where(gain > 0, tl.minimum((hi - centre) / tl.where(gain > 0, gain, 1.0), 1.0), 1.0)
    room_down = tl.where(loss < 0, tl.minimum((lo - centre) / tl.where(loss < 0, loss, -1.0), 1.0), 1.0)
    return room_up, room_down


@triton.jit
def _limited(f, up_here, down_here, up_there, down_there):
    """A flux into a pixel scaled by the smaller room of the pixel it enters and the one it leaves."""
    return f * tl.where(f > 0, tl.minimum(up_here, down_there), tl.minimum(down_here, up_there))


# --- tiles: 2-D tiles, every window from memory ---------------------------------------------------------------


@triton.jit
def _tensor_kernel(u_ptr, abc_ptr, taps_ptr, H, W, alpha, inv_h, KSIZE: tl.constexpr,
                   BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """(A, B, C) at the corner (r, c) between pixels r-1..r, c-1..c, summed over colours:
    the smoothed image at those four pixels (separable Gaussian over a mirrored window)."""
    HALF: tl.constexpr = KSIZE // 2
    tiles = tl.cdiv(H + 1, BLOCK_R) * tl.cdiv(W + 1, BLOCK_C)
    n = (tl.program_id(0) // tiles).to(tl.int64)
    r, c, mask = _tile(tl.program_id(0) % tiles, H + 1, W + 1, BLOCK_R, BLOCK_C)
    A = tl.zeros((BLOCK_R, BLOCK_C), tl.float32)
    B = tl.zeros((BLOCK_R, BLOCK_C), tl.float32)
    C = tl.zeros((BLOCK_R, BLOCK_C), tl.float32)
    for ch in tl.static_range(3):
        plane = u_ptr + (n * 3 + ch) * H * W
        s_tl = tl.zeros((BLOCK_R, BLOCK_C), tl.float32)
        s_tr = tl.zeros((BLOCK_R, BLOCK_C), tl.float32)
        s_bl = tl.zeros((BLOCK_R, BLOCK_C), tl.float32)
        s_br = tl.zeros((BLOCK_R, BLOCK_C), tl.float32)
        for a in tl.static_range(KSIZE + 1):
            row = _mirror(r - 1 - HALF + a, H) * W
            left = tl.zeros((BLOCK_R, BLOCK_C), tl.float32)
            right = tl.zeros((BLOCK_R, BLOCK_C), tl.float32)
            for b in tl.static_range(KSIZE + 1):
                x = tl.load(plane + row + _mirror(c - 1 - HALF + b, W), mask=mask, other=0.0)
                if b < KSIZE:
                    left += tl.load(taps_ptr + b) * x
                if b > 0:
                    right += tl.load(taps_ptr + b - 1) * x
            if a < KSIZE:
                s_tl += tl.load(taps_ptr + a) * left
                s_tr += tl.load(taps_ptr + a) * right
            if a > 0:
                s_bl += tl.load(taps_ptr + a - 1) * left
                s_br += tl.load(taps_ptr + a - 1) * right
        dA, dB, dC = _corner_tensor(s_tl, s_tr, s_bl, s_br, alpha, inv_h)
        A += dA
        B += dB
        C += dC
    corners = (H + 1) * (W + 1)
    out = abc_ptr + n * 3 * corners + r * (W + 1) + c
    tl.store(out, A, mask=mask)
    tl.store(out + corners, B, mask=mask)
    tl.store(out + 2 * corners, C, mask=mask)


@triton.jit
def _blur(plane, r, c, rows, cols, mask, taps_ptr, KSIZE: tl.constexpr, BLOCK_R: tl.constexpr,
          BLOCK_C: tl.constexpr):
    """Gaussian of a corner-grid plane at (r, c), mirrored at the grid's border."""
    HALF: tl.constexpr = KSIZE // 2
    out = tl.zeros((BLOCK_R, BLOCK_C), tl.float32)
    for a in tl.static_range(KSIZE):
        row = _mirror(r - HALF + a, rows) * cols
        line = tl.zeros((BLOCK_R, BLOCK_C), tl.float32)
        for b in tl.static_range(KSIZE):
            line += tl.load(taps_ptr + b) * tl.load(plane + row + _mirror(c - HALF + b, cols), mask=mask, other=0.0)
        out += tl.load(taps_ptr + a) * line
    return out


@triton.jit
def _weights_kernel(abc_ptr, w_ptr, taps_ptr, H, W, alpha, contrast, k, KSIZE: tl.constexpr,
                    BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """Tensorblur, then ``_stencil_weights``."""
    tiles = tl.cdiv(H + 1, BLOCK_R) * tl.cdiv(W + 1, BLOCK_C)
    n = (tl.program_id(0) // tiles).to(tl.int64)
    r, c, mask = _tile(tl.program_id(0) % tiles, H + 1, W + 1, BLOCK_R, BLOCK_C)
    corners = (H + 1) * (W + 1)
    plane = abc_ptr + n * 3 * corners
    A = _blur(plane, r, c, H + 1, W + 1, mask, taps_ptr, KSIZE, BLOCK_R, BLOCK_C)
    B = _blur(plane + corners, r, c, H + 1, W + 1, mask, taps_ptr, KSIZE, BLOCK_R, BLOCK_C)
    C = _blur(plane + 2 * corners, r, c, H + 1, W + 1, mask, taps_ptr, KSIZE, BLOCK_R, BLOCK_C)
    w_row, w_col, w_main, w_anti = _stencil_weights(A, B, C, alpha, contrast, k)
    out = w_ptr + n * 4 * corners + r * (W + 1) + c
    tl.store(out, w_row, mask=mask)
    tl.store(out + corners, w_col, mask=mask)
    tl.store(out + 2 * corners, w_main, mask=mask)
    tl.store(out + 3 * corners, w_anti, mask=mask)


@triton.jit
def _weight(w_ptr, i, j, W, corners, mask, DY: tl.constexpr, DX: tl.constexpr):
    """Pixel (i, j)'s weight to its neighbour (i + DY, j + DX), from the corners they
    share: two along a row or column, one along a diagonal (corner (r, c) is the upper
    left one of pixel (r, c))."""
    r = i + (DY + 1) // 2
    c = j + (DX + 1) // 2
    if DY == 0:
        w = tl.load(w_ptr + r * (W + 1) + c, mask=mask, other=0.0) \
            + tl.load(w_ptr + (r + 1) * (W + 1) + c, mask=mask, other=0.0)
    elif DX == 0:
        plane = w_ptr + corners
        w = tl.load(plane + r * (W + 1) + c, mask=mask, other=0.0) \
            + tl.load(plane + r * (W + 1) + c + 1, mask=mask, other=0.0)
    elif DY == DX:
        w = tl.load(w_ptr + 2 * corners + r * (W + 1) + c, mask=mask, other=0.0)
    else:
        w = tl.load(w_ptr + 3 * corners + r * (W + 1) + c, mask=mask, other=0.0)
    return w


@triton.jit
def _rooms_kernel(u_ptr, w_ptr, rooms_ptr, lo_ptr, hi_ptr, H, W, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """``_rooms`` of one channel's pixels: up (first plane) and down (second plane)."""
    plane_id = tl.program_id(0).to(tl.int64)  # image * 3 + channel
    n = plane_id // 3
    i, j, mask = _tile(tl.program_id(1), H, W, BLOCK_R, BLOCK_C)
    plane = u_ptr + plane_id * H * W
    weights = w_ptr + n * 4 * (H + 1) * (W + 1)
    centre = tl.load(plane + i * W + j, mask=mask, other=0.0)
    gain = tl.zeros((BLOCK_R, BLOCK_C), tl.float32)
    loss = tl.zeros((BLOCK_R, BLOCK_C), tl.float32)
    for a in tl.static_range(3):
        for b in tl.static_range(3):
            if a * 3 + b != 4:
                w = _weight(weights, i, j, W, (H + 1) * (W + 1), mask, a - 1, b - 1)
                other = tl.load(plane + _mirror(i + a - 1, H) * W + _mirror(j + b - 1, W), mask=mask, other=0.0)
                f = w * (other - centre)
                gain += tl.maximum(f, 0.0)
                loss += tl.minimum(f, 0.0)
    room_up, room_down = _rooms(centre, gain, loss, tl.load(lo_ptr + plane_id), tl.load(hi_ptr + plane_id))
    out = rooms_ptr + plane_id * 2 * H * W + i * W + j
    tl.store(out, room_up, mask=mask)
    tl.store(out + H * W, room_down, mask=mask)


@triton.jit
def _update_kernel(u_ptr, w_ptr, rooms_ptr, out_ptr, H, W, LIMIT: tl.constexpr, BLOCK_R: tl.constexpr,
                   BLOCK_C: tl.constexpr):
    """One channel's explicit step: the eight fluxes into each pixel, each ``_limited`` (with ``LIMIT``)."""
    plane_id = tl.program_id(0).to(tl.int64)
    n = plane_id // 3
    i, j, mask = _tile(tl.program_id(1), H, W, BLOCK_R, BLOCK_C)
    plane = u_ptr + plane_id * H * W
    weights = w_ptr + n * 4 * (H + 1) * (W + 1)
    rooms = rooms_ptr + plane_id * 2 * H * W
    centre = tl.load(plane + i * W + j, mask=mask, other=0.0)
    if LIMIT:
        up_here = tl.load(rooms + i * W + j, mask=mask, other=0.0)
        down_here = tl.load(rooms + H * W + i * W + j, mask=mask, other=0.0)
    total = tl.zeros((BLOCK_R, BLOCK_C), tl.float32)
    for a in tl.static_range(3):
        for b in tl.static_range(3):
            if a * 3 + b != 4:
                w = _weight(weights, i, j, W, (H + 1) * (W + 1), mask, a - 1, b - 1)
                at = _mirror(i + a - 1, H) * W + _mirror(j + b - 1, W)
                f = w * (tl.load(plane + at, mask=mask, other=0.0) - centre)
                if LIMIT:
                    f = _limited(f, up_here, down_here, tl.load(rooms + at, mask=mask, other=0.0),
                                 tl.load(rooms + H * W + at, mask=mask, other=0.0))
                total += f
    tl.store(out_ptr + plane_id * H * W + i * W + j, centre + total, mask=mask)


# --- rows: each program walks down a strip, the column passes from rows kept in registers ---------------------


@triton.jit
def _taps5(x0, x1, x2, x3, x4, g0, g1, g2):
    """The symmetric 5-tap Gaussian (g0, g1, g2, g1, g0) over five samples."""
    return g0 * (x0 + x4) + g1 * (x1 + x3) + g2 * x2


@triton.jit
def _pixel_row_pass(row, c0, c1, c2, c3, c4, c5, mask, g0, g1, g2):
    """An image row's Gaussian along the row at the pixel columns left and right of each corner, from the six
    mirrored columns ``c0..c5`` (corner c lies between pixel columns c - 1 and c)."""
    x0 = tl.load(row + c0, mask=mask, other=0.0)
    x1 = tl.load(row + c1, mask=mask, other=0.0)
    x2 = tl.load(row + c2, mask=mask, other=0.0)
    x3 = tl.load(row + c3, mask=mask, other=0.0)
    x4 = tl.load(row + c4, mask=mask, other=0.0)
    x5 = tl.load(row + c5, mask=mask, other=0.0)
    return _taps5(x0, x1, x2, x3, x4, g0, g1, g2), _taps5(x1, x2, x3, x4, x5, g0, g1, g2)


@triton.jit
def _colour_tensor(l0, l1, l2, l3, l4, l5, r0, r1, r2, r3, r4, r5, g0, g1, g2, alpha, inv_h):
    """One colour's (A, B, C) at corner row r from the row passes left (l) and right (r) of it in pixel rows
    r-3..r+2: the column pass gives the smoothed pixels above (rows r-3..r+1) and below (r-2..r+2) it."""
    return _corner_tensor(_taps5(l0, l1, l2, l3, l4, g0, g1, g2), _taps5(r0, r1, r2, r3, r4, g0, g1, g2),
                          _taps5(l1, l2, l3, l4, l5, g0, g1, g2), _taps5(r1, r2, r3, r4, r5, g0, g1, g2),
                          alpha, inv_h)


@triton.jit
def _tensor_rows_kernel(u_ptr, abc_ptr, H, W, alpha, inv_h, g0, g1, g2, ROWS: tl.constexpr,
                        BLOCK_C: tl.constexpr):
    """(A, B, C) summed over colours, as ``_tensor_kernel``, for ROWS corner rows of a strip of one image."""
    n = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    r0 = tl.program_id(2) * ROWS
    mask = c < W + 1
    c0 = _mirror(c - 3, W)
    c1 = _mirror(c - 2, W)
    c2 = _mirror(c - 1, W)
    c3 = _mirror(c, W)
    c4 = _mirror(c + 1, W)
    c5 = _mirror(c + 2, W)
    red = u_ptr + n * 3 * H * W
    green = red + H * W
    blue = green + H * W
    corners = (H + 1) * (W + 1)
    out = abc_ptr + n * 3 * corners + c
    zero = tl.zeros((BLOCK_C,), tl.float32)
    # pixel rows r-3..r+1 of corner row r, row passes left (rl/gl/bl) and right (rr/gr/br) of the corners, per colour
    rl0, rl1, rl2, rl3, rl4, rr0, rr1, rr2, rr3, rr4 = zero, zero, zero, zero, zero, zero, zero, zero, zero, zero
    gl0, gl1, gl2, gl3, gl4, gr0, gr1, gr2, gr3, gr4 = zero, zero, zero, zero, zero, zero, zero, zero, zero, zero
    bl0, bl1, bl2, bl3, bl4, br0, br1, br2, br3, br4 = zero, zero, zero, zero, zero, zero, zero, zero, zero, zero
    for k in range(tl.minimum(ROWS, H + 1 - r0) + 5):  # k < 5: the rows above the first corner row
        row = _mirror(r0 - 3 + k, H) * W
        rl5, rr5 = _pixel_row_pass(red + row, c0, c1, c2, c3, c4, c5, mask, g0, g1, g2)
        gl5, gr5 = _pixel_row_pass(green + row, c0, c1, c2, c3, c4, c5, mask, g0, g1, g2)
        bl5, br5 = _pixel_row_pass(blue + row, c0, c1, c2, c3, c4, c5, mask, g0, g1, g2)
        A, B, C = _colour_tensor(rl0, rl1, rl2, rl3, rl4, rl5, rr0, rr1, rr2, rr3, rr4, rr5, g0, g1, g2, alpha,
                                 inv_h)
        dA, dB, dC = _colour_tensor(gl0, gl1, gl2, gl3, gl4, gl5, gr0, gr1, gr2, gr3, gr4, gr5, g0, g1, g2, alpha,
                                    inv_h)
        A, B, C = A + dA, B + dB, C + dC
        dA, dB, dC = _colour_tensor(bl0, bl1, bl2, bl3, bl4, bl5, br0, br1, br2, br3, br4, br5, g0, g1, g2, alpha,
                                    inv_h)
        A, B, C = A + dA, B + dB, C + dC
        here = out + (r0 - 5 + k) * (W + 1)
        keep = mask & (k >= 5)
        tl.store(here, A, mask=keep)
        tl.store(here + corners, B, mask=keep)
        tl.store(here + 2 * corners, C, mask=keep)
        rl0, rl1, rl2, rl3, rl4, rr0, rr1, rr2, rr3, rr4 = rl1, rl2, rl3, rl4, rl5, rr1, rr2, rr3, rr4, rr5
        gl0, gl1, gl2, gl3, gl4, gr0, gr1, gr2, gr3, gr4 = gl1, gl2, gl3, gl4, gl5, gr1, gr2, gr3, gr4, gr5
        bl0, bl1, bl2, bl3, bl4, br0, br1, br2, br3, br4 = bl1, bl2, bl3, bl4, bl5, br1, br2, br3, br4, br5


@triton.jit
def _corner_row_pass(row, c0, c1, c2, c3, c4, mask, g0, g1, g2):
    """A corner-grid row's Gaussian along the row, from the five mirrored columns ``c0..c4``."""
    return _taps5(tl.load(row + c0, mask=mask, other=0.0), tl.load(row + c1, mask=mask, other=0.0),
                  tl.load(row + c2, mask=mask, other=0.0), tl.load(row + c3, mask=mask, other=0.0),
                  tl.load(row + c4, mask=mask, other=0.0), g0, g1, g2)


@triton.jit
def _weights_rows_kernel(abc_ptr, w_ptr, H, W, alpha, contrast, k_step, g0, g1, g2, ROWS: tl.constexpr,
                         BLOCK_C: tl.constexpr):
    """Tensorblur, then ``_stencil_weights``, for ROWS corner rows of a strip of one image."""
    n = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    r0 = tl.program_id(2) * ROWS
    mask = c < W + 1
    c0 = _mirror(c - 2, W + 1)
    c1 = _mirror(c - 1, W + 1)
    c2 = c
    c3 = _mirror(c + 1, W + 1)
    c4 = _mirror(c + 2, W + 1)
    corners = (H + 1) * (W + 1)
    plane_a = abc_ptr + n * 3 * corners
    plane_b = plane_a + corners
    plane_c = plane_b + corners
    out = w_ptr + n * 4 * corners + c
    zero = tl.zeros((BLOCK_C,), tl.float32)
    A0, A1, A2, A3, B0, B1, B2, B3, C0, C1, C2, C3 = zero, zero, zero, zero, zero, zero, zero, zero, zero, zero, \
        zero, zero  # row passes of A, B, C in corner rows r-2..r+1
    for k in range(tl.minimum(ROWS, H + 1 - r0) + 4):  # k < 4: the rows above the first output row
        row = _mirror(r0 - 2 + k, H + 1) * (W + 1)
        A4 = _corner_row_pass(plane_a + row, c0, c1, c2, c3, c4, mask, g0, g1, g2)
        B4 = _corner_row_pass(plane_b + row, c0, c1, c2, c3, c4, mask, g0, g1, g2)
        C4 = _corner_row_pass(plane_c + row, c0, c1, c2, c3, c4, mask, g0, g1, g2)
        w_row, w_col, w_main, w_anti = _stencil_weights(
            _taps5(A0, A1, A2, A3, A4, g0, g1, g2), _taps5(B0, B1, B2, B3, B4, g0, g1, g2),
            _taps5(C0, C1, C2, C3, C4, g0, g1, g2), alpha, contrast, k_step)
        here = out + (r0 - 4 + k) * (W + 1)
        keep = mask & (k >= 4)
        tl.store(here, w_row, mask=keep)
        tl.store(here + corners, w_col, mask=keep)
        tl.store(here + 2 * corners, w_main, mask=keep)
        tl.store(here + 3 * corners, w_anti, mask=keep)
        A0, A1, A2, A3, B0, B1, B2, B3, C0, C1, C2, C3 = A1, A2, A3, A4, B1, B2, B3, B4, C1, C2, C3, C4


# A pixel's 3x3 neighbourhood is three pixel rows (above, at and below it), each a tuple of its values at the
# columns left of, at and right of it; corner weights are ``_stencil_row``'s 8-tuples; the fluxes into a pixel are
# an 8-tuple in the order nw, n, ne, w, e, sw, s, se. Tuples of values are held in registers like single values.


@triton.jit
def _stencil_row(weights, corner_row, j, corners, mask):
    """A corner row's four weight planes (row, column, main, anti) at corner columns j and j + 1."""
    at = weights + corner_row + j
    return (tl.load(at, mask=mask, other=0.0), tl.load(at + 1, mask=mask, other=0.0),
            tl.load(at + corners, mask=mask, other=0.0), tl.load(at + corners + 1, mask=mask, other=0.0),
            tl.load(at + 2 * corners, mask=mask, other=0.0), tl.load(at + 2 * corners + 1, mask=mask, other=0.0),
            tl.load(at + 3 * corners, mask=mask, other=0.0), tl.load(at + 3 * corners + 1, mask=mask, other=0.0))


@triton.jit
def _three(row, jm, j, jp, mask):
    """A row's values at the mirrored columns j - 1, j, j + 1."""
    return (tl.load(row + jm, mask=mask, other=0.0), tl.load(row + j, mask=mask, other=0.0),
            tl.load(row + jp, mask=mask, other=0.0))


@triton.jit
def _colour_rows(red, green, blue, row, jm, j, jp, mask):
    """``_three`` of pixel row ``row`` (an offset) in each colour's plane."""
    return _three(red + row, jm, j, jp, mask), _three(green + row, jm, j, jp, mask), _three(blue + row, jm, j, jp, mask)


@triton.jit
def _strip(W, ROWS: tl.constexpr, BLOCK_C: tl.constexpr):
    """A rows-layout program's pixels: the strip's columns j (with their mirrored neighbours j - 1, j + 1 and the
    mask of those inside the image) and its first pixel row."""
    j = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    return j, _mirror(j - 1, W), _mirror(j + 1, W), j < W, tl.program_id(2) * ROWS


@triton.jit
def _fluxes(above, here, below, t, b):
    """The eight fluxes into pixel ``here[1]`` from its neighbourhood, with the weights of the corners above (t)
    and below (b) it, left and right (the pairs and diagonals of ``_weight``)."""
    u = here[1]
    return (t[4] * (above[0] - u), (t[2] + t[3]) * (above[1] - u), t[7] * (above[2] - u),
            (t[0] + b[0]) * (here[0] - u), (t[1] + b[1]) * (here[2] - u),
            b[6] * (below[0] - u), (b[2] + b[3]) * (below[1] - u), b[5] * (below[2] - u))


@triton.jit
def _flux_rooms(u, f, lo, hi):
    """``_rooms`` of pixel value ``u`` from its eight fluxes."""
    gain = (tl.maximum(f[0], 0.0) + tl.maximum(f[1], 0.0) + tl.maximum(f[2], 0.0) + tl.maximum(f[3], 0.0)
            + tl.maximum(f[4], 0.0) + tl.maximum(f[5], 0.0) + tl.maximum(f[6], 0.0) + tl.maximum(f[7], 0.0))
    loss = (tl.minimum(f[0], 0.0) + tl.minimum(f[1], 0.0) + tl.minimum(f[2], 0.0) + tl.minimum(f[3], 0.0)
            + tl.minimum(f[4], 0.0) + tl.minimum(f[5], 0.0) + tl.minimum(f[6], 0.0) + tl.minimum(f[7], 0.0))
    return _rooms(u, gain, loss, lo, hi)


@triton.jit
def _colour_rooms(above, here, below, t, b, lo, hi):
    """``_rooms`` of one colour's pixel from its neighbourhood and its corners' weights."""
    return _flux_rooms(here[1], _fluxes(above, here, below, t, b), lo, hi)


@triton.jit
def _limited_sum(f, up, down, LIMIT: tl.constexpr):
    """A pixel's eight fluxes, each ``_limited`` (with ``LIMIT``) by the rooms up and down of its neighbourhood
    (each three rows of three, as the values), summed."""
    if LIMIT:
        u, d = up[1][1], down[1][1]
        f = (_limited(f[0], u, d, up[0][0], down[0][0]), _limited(f[1], u, d, up[0][1], down[0][1]),
             _limited(f[2], u, d, up[0][2], down[0][2]), _limited(f[3], u, d, up[1][0], down[1][0]),
             _limited(f[4], u, d, up[1][2], down[1][2]), _limited(f[5], u, d, up[2][0], down[2][0]),
             _limited(f[6], u, d, up[2][1], down[2][1]), _limited(f[7], u, d, up[2][2], down[2][2]))
    return f[0] + f[1] + f[2] + f[3] + f[4] + f[5] + f[6] + f[7]


@triton.jit
def _colour_update(above, here, below, t, b, up, down, LIMIT: tl.constexpr):
    """One colour's pixel after the step, from its neighbourhood, its corners' weights and (with ``LIMIT``) the
    rooms around it."""
    return here[1] + _limited_sum(_fluxes(above, here, below, t, b), up, down, LIMIT)


@triton.jit
def _where3(condition, x, y):
    """``tl.where`` of each of three values."""
    return tl.where(condition, x[0], y[0]), tl.where(condition, x[1], y[1]), tl.where(condition, x[2], y[2])


@triton.jit
def _rooms_rows_kernel(u_ptr, w_ptr, rooms_ptr, lo_ptr, hi_ptr, H, W, ROWS: tl.constexpr, BLOCK_C: tl.constexpr):
    """``_rooms`` of all three colours for ROWS pixel rows of a strip of one image (layout as ``_rooms_kernel``)."""
    n = tl.program_id(0).to(tl.int64)
    j, jm, jp, mask, i0 = _strip(W, ROWS, BLOCK_C)
    corners = (H + 1) * (W + 1)
    weights = w_ptr + n * 4 * corners
    red = u_ptr + n * 3 * H * W
    green = red + H * W
    blue = green + H * W
    out = rooms_ptr + n * 6 * H * W + j
    lo = tl.load(lo_ptr + 3 * n), tl.load(lo_ptr + 3 * n + 1), tl.load(lo_ptr + 3 * n + 2)
    hi = tl.load(hi_ptr + 3 * n), tl.load(hi_ptr + 3 * n + 1), tl.load(hi_ptr + 3 * n + 2)
    zero = tl.zeros((BLOCK_C,), tl.float32)
    three = (zero, zero, zero)
    # per colour, pixel rows i-1 (p) and i (q); corner row i's weights (wt; wb: row i + 1)
    p, q = (three, three, three), (three, three, three)
    wt = (zero, zero, zero, zero, zero, zero, zero, zero)
    for k in range(tl.minimum(ROWS, H - i0) + 2):  # k < 2: the rows above the first output row
        wb = _stencil_row(weights, tl.maximum(i0 - 1 + k, 0) * (W + 1), j, corners, mask)
        s = _colour_rows(red, green, blue, _mirror(i0 - 1 + k, H) * W, jm, j, jp, mask)
        here = out + (i0 - 2 + k) * W
        for c in tl.static_range(3):
            up, down = _colour_rooms(p[c], q[c], s[c], wt, wb, lo[c], hi[c])
            tl.store(here + 2 * c * H * W, up, mask=mask & (k >= 2))
            tl.store(here + (2 * c + 1) * H * W, down, mask=mask & (k >= 2))
        p, q, wt = q, s, wb


@triton.jit
def _update_rows_kernel(u_ptr, w_ptr, rooms_ptr, out_ptr, H, W, LIMIT: tl.constexpr, ROWS: tl.constexpr,
                        BLOCK_C: tl.constexpr):
    """The explicit step of all three colours for ROWS pixel rows of a strip of one image."""
    n = tl.program_id(0).to(tl.int64)
    j, jm, jp, mask, i0 = _strip(W, ROWS, BLOCK_C)
    corners = (H + 1) * (W + 1)
    plane = H * W
    weights = w_ptr + n * 4 * corners
    red = u_ptr + n * 3 * plane
    green = red + plane
    blue = green + plane
    rooms = rooms_ptr + n * 6 * plane
    out = out_ptr + n * 3 * plane + j
    zero = tl.zeros((BLOCK_C,), tl.float32)
    three = (zero, zero, zero)
    nine = (three, three, three)
    # per colour, pixel rows i-1 (p) and i (q) and, with LIMIT, their rooms up (U) and down (D); corner row i's
    # weights (wt; wb: row i + 1)
    p, q, Up, Uq, Us, Dp, Dq, Ds = nine, nine, nine, nine, nine, nine, nine, nine
    wt = (zero, zero, zero, zero, zero, zero, zero, zero)
    for k in range(tl.minimum(ROWS, H - i0) + 2):  # k < 2: the rows above the first output row
        row = _mirror(i0 - 1 + k, H) * W
        wb = _stencil_row(weights, tl.maximum(i0 - 1 + k, 0) * (W + 1), j, corners, mask)
        s = _colour_rows(red, green, blue, row, jm, j, jp, mask)
        if LIMIT:
            Us = _colour_rows(rooms, rooms + 2 * plane, rooms + 4 * plane, row, jm, j, jp, mask)
            Ds = _colour_rows(rooms + plane, rooms + 3 * plane, rooms + 5 * plane, row, jm, j, jp, mask)
        # the three colours stepped before any is stored (stepping and storing each in turn took 8 more registers
        # in rows-2x: benchmarks/eed_kernel_resources.py)
        red_next = _colour_update(p[0], q[0], s[0], wt, wb, (Up[0], Uq[0], Us[0]), (Dp[0], Dq[0], Ds[0]), LIMIT)
        green_next = _colour_update(p[1], q[1], s[1], wt, wb, (Up[1], Uq[1], Us[1]), (Dp[1], Dq[1], Ds[1]), LIMIT)
        blue_next = _colour_update(p[2], q[2], s[2], wt, wb, (Up[2], Uq[2], Us[2]), (Dp[2], Dq[2], Ds[2]), LIMIT)
        here = out + (i0 - 2 + k) * W
        keep = mask & (k >= 2)
        tl.store(here, red_next, mask=keep)
        tl.store(here + plane, green_next, mask=keep)
        tl.store(here + 2 * plane, blue_next, mask=keep)
        p, q, wt = q, s, wb
        if LIMIT:
            Up, Uq, Dp, Dq = Uq, Us, Dq, Ds


@triton.jit
def _fused_update_rows_kernel(u_ptr, w_ptr, lo_ptr, hi_ptr, out_ptr, H, W, ROWS: tl.constexpr, BLOCK_C: tl.constexpr):
    """The limited step of one colour for ROWS pixel rows of a strip of one image, with the rooms of each pixel
    and of its neighbours made here from the image and the weights instead of read from a buffer written by
    ``_rooms_rows_kernel``: 19 fewer planes of memory traffic per step, for rooms made three times over (at
    the columns left of, at and right of each pixel: a row's neighbours along it cannot be shifted in
    registers). Walking down, iteration t reads pixel row t, makes the rooms of row t - 1 and steps row t - 2."""
    plane_id = tl.program_id(0).to(tl.int64)  # image * 3 + colour
    n = plane_id // 3
    j, jl, jr, mask, i0 = _strip(W, ROWS, BLOCK_C)
    # the pixel columns whose rooms a pixel's step needs (left, centre, right), each with its mirrored neighbours
    l0, l2 = _mirror(jl - 1, W), _mirror(jl + 1, W)
    r0, r2 = _mirror(jr - 1, W), _mirror(jr + 1, W)
    corners = (H + 1) * (W + 1)
    weights = w_ptr + n * 4 * corners
    u = u_ptr + plane_id * H * W
    out = out_ptr + plane_id * H * W + j
    lo = tl.load(lo_ptr + plane_id)
    hi = tl.load(hi_ptr + plane_id)
    zero = tl.zeros((BLOCK_C,), tl.float32)
    three = (zero, zero, zero)
    eight = (zero, zero, zero, zero, zero, zero, zero, zero)
    # around the left, centre and right columns: pixel rows t-2 (a) and t-1 (b) and corner row t-1's weights (w);
    # rooms up (U) and down (D) of rows t-3 (p) and t-2 (q) at those columns; the fluxes into row t-2's pixels (f)
    a, b, w = (three, three, three), (three, three, three), (eight, eight, eight)
    Up, Uq, Dp, Dq = three, three, three, three
    f = eight
    for k in range(tl.minimum(ROWS, H - i0) + 4):  # k < 4: the rows above the first output row
        t = i0 - 2 + k
        row = u + _mirror(t, H) * W
        s = _three(row, l0, jl, l2, mask), _three(row, jl, j, jr, mask), _three(row, r0, jr, r2, mask)
        corner_row = tl.minimum(tl.maximum(t, 0), H) * (W + 1)
        v = (_stencil_row(weights, corner_row, jl, corners, mask), _stencil_row(weights, corner_row, j, corners, mask),
             _stencil_row(weights, corner_row, jr, corners, mask))
        UL, DL = _colour_rooms(a[0], b[0], s[0], w[0], v[0], lo, hi)
        g = _fluxes(a[1], b[1], s[1], w[1], v[1])
        UC, DC = _flux_rooms(b[1][1], g, lo, hi)
        UR, DR = _colour_rooms(a[2], b[2], s[2], w[2], v[2], lo, hi)
        Us, Ds = (UL, UC, UR), (DL, DC, DR)
        # the rooms of a row outside the picture are those of its mirror image: row 0 above row 0, row H-1 below
        top = t - 2 == 0
        bottom = t - 2 == H - 1
        step = _limited_sum(f, (_where3(top, Uq, Up), Uq, _where3(bottom, Uq, Us)),
                            (_where3(top, Dq, Dp), Dq, _where3(bottom, Dq, Ds)), True)
        tl.store(out + (t - 2) * W, a[1][1] + step, mask=mask & (k >= 4))
        a, b, w, f = b, s, v, g
        Up, Uq, Dp, Dq = Uq, Us, Dq, Ds


class Stepper:
    """EED steps for a batch (N, 3, H, W) float32 CUDA tensor; buffers made once per batch size.
    ``variant`` names the kernels' layout (``VARIANTS``)."""

    def __init__(self, height: int, width: int, params: EEDParams, device, variant: str | Variant = DEFAULT_VARIANT):
        import torch

        symmetric_index(height, params.kernel_size // 2 + 1)  # the same size checks as the other paths
        symmetric_index(width, params.kernel_size // 2 + 1)
        if isinstance(variant, str) and variant not in VARIANTS:
            raise EEDError(f"unknown EED kernel layout {variant!r}; known: {', '.join(VARIANTS)}")
        variant = VARIANTS[variant] if isinstance(variant, str) else variant
        if variant.layout == "rows" and params.kernel_size != 5:  # its column passes carry five rows
            variant = VARIANTS["tiles"]
        self.p, self.height, self.width, self.device = params, height, width, device
        self.variant = variant
        taps = gaussian_kernel_1d(params.kernel_size, params.sigma).astype(np.float32)
        self.taps = torch.as_tensor(taps, device=device)
        self.half_taps = tuple(float(g) for g in taps[:3])  # (g0, g1, g2) of the symmetric 5 taps (rows layout)
        self.buffers: dict[int, tuple] = {}

    def _buffers(self, n: int):
        """Corner tensor, corner weights, rooms and the next image for a batch of ``n``."""
        import torch

        if n not in self.buffers:
            corners = (self.height + 1) * (self.width + 1)
            pixels = self.height * self.width
            self.buffers = {n: tuple(torch.empty(size, dtype=torch.float32, device=self.device)
                                     for size in (n * 3 * corners, n * 4 * corners, n * 6 * pixels, n * 3 * pixels))}
        return self.buffers[n]

    def __call__(self, u, steps: int, bounds):
        """``u`` after ``steps`` steps (a new tensor; ``u`` is reused as a buffer);
        ``bounds`` (low, high), each (N, 3, 1, 1), turns on the limiter."""
        n = u.shape[0]
        abc, weights, rooms, spare = self._buffers(n)
        spare = spare.view(u.shape)
        lo, hi = (None, None) if bounds is None else (b.reshape(-1).contiguous() for b in bounds)
        step = self._rows_step if self.variant.layout == "rows" else self._tiles_step
        for _ in range(steps):
            step(n, u, abc, weights, rooms, spare, lo, hi)
            u, spare = spare, u
        self.buffers[n] = (abc, weights, rooms, spare)
        return u

    def _launch(self, kernel, grid, *args, **meta):
        """One kernel launch: the one place a step starts its kernels (``benchmarks/eed_kernel_resources.py``
        compiles them here instead, for a GPU that is not there)."""
        kernel[grid](*args, **meta)

    def _tiles_step(self, n, u, abc, weights, rooms, out, lo, hi):
        p, height, width, v = self.p, self.height, self.width, self.variant
        corner_tiles = (n * triton.cdiv(height + 1, v.rows) * triton.cdiv(width + 1, v.cols),)
        pixel_tiles = (n * 3, triton.cdiv(height, v.rows) * triton.cdiv(width, v.cols))
        tiles = dict(BLOCK_R=v.rows, BLOCK_C=v.cols, num_warps=v.num_warps)
        self._launch(_tensor_kernel, corner_tiles, u, abc, self.taps, height, width, p.alpha, 1 / p.h,
                     KSIZE=p.kernel_size, **tiles)
        self._launch(_weights_kernel, corner_tiles, abc, weights, self.taps, height, width, p.alpha, p.contrast,
                     p.tau / (2 * p.h * p.h), KSIZE=p.kernel_size, **tiles)
        if lo is not None:
            self._launch(_rooms_kernel, pixel_tiles, u, weights, rooms, lo, hi, height, width, **tiles)
        self._launch(_update_kernel, pixel_tiles, u, weights, rooms, out, height, width, LIMIT=lo is not None, **tiles)

    def _rows_step(self, n, u, abc, weights, rooms, out, lo, hi):
        p, height, width, v = self.p, self.height, self.width, self.variant
        g0, g1, g2 = self.half_taps
        corner_strips = (n, triton.cdiv(width + 1, v.cols), triton.cdiv(height + 1, v.rows))
        pixel_strips = (n, triton.cdiv(width, v.cols), triton.cdiv(height, v.rows))
        strips = dict(ROWS=v.rows, BLOCK_C=v.cols, num_warps=v.num_warps)
        self._launch(_tensor_rows_kernel, corner_strips, u, abc, height, width, p.alpha, 1 / p.h, g0, g1, g2, **strips)
        self._launch(_weights_rows_kernel, corner_strips, abc, weights, height, width, p.alpha, p.contrast,
                     p.tau / (2 * p.h * p.h), g0, g1, g2, **strips)
        if lo is not None and v.fused:  # one program per colour
            self._launch(_fused_update_rows_kernel, (n * 3, *pixel_strips[1:]), u, weights, lo, hi, out, height, width,
                         **strips)
        elif lo is not None:
            self._launch(_rooms_rows_kernel, pixel_strips, u, weights, rooms, lo, hi, height, width, **strips)
        if lo is None or not v.fused:
            self._launch(_update_rows_kernel, pixel_strips, u, weights, rooms, out, height, width,
                         LIMIT=lo is not None, **strips)
