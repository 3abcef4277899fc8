"""EED steps on CUDA as Triton kernels.

The batched torch form reads and writes a dozen whole-batch temporaries per step. Here a
step is four kernels over tiles of every image, each keeping its intermediate values in
registers and reading its neighbourhood straight from the previous kernel's output:

1. ``_tensor_kernel``: pre-smoothing (from a 6x6 window per corner) and the colour
   structure tensor on the corner grid;
2. ``_weights_kernel``: tensorblur, diffusion tensor and the delta stencil's corner weights;
3. ``_rooms_kernel`` (limiter only): each pixel's Zalesak factors;
4. ``_update_kernel``: the eight fluxes, limited, into a fresh image buffer.

The first two run the tiles of an image one after the other (their halos overlap); the
last two run one program per channel and tile, the three channels of a tile side by side,
so the tile's weights are read from memory once.

A step cannot be carried further in one launch: one step of a pixel depends on pixels
up to 7 away (Gaussian 2, corner 1, tensorblur 2, stencil 1, limiter 1), and Triton's
register tiles cannot be shifted, so each stage's neighbours must come from memory.
Symmetric padding is index mirroring, as ``stimuli.eed.symmetric_index``. The scheme is
the one documented in ``stimuli.eed``; ``TRITON_INTERPRET=1`` runs these kernels on the
CPU (tests).
"""

from __future__ import annotations

import numpy as np
import triton
import triton.language as tl

from .eed_scheme import EEDParams, gaussian_kernel_1d, symmetric_index

BLOCK_ROWS, BLOCK_COLS = 16, 64
BYTES_PER_PIXEL = 4 * (3 + 3 + 3 + 4 + 6)
"""Device memory per image pixel: image and next image, tensor, corner weights, rooms."""


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
def _tensor_kernel(u_ptr, abc_ptr, taps_ptr, H, W, alpha, inv_h, KSIZE: tl.constexpr,
                   BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """(A, B, C) at the corner (r, c) between pixels r-1..r, c-1..c, summed over colours:
    the smoothed image at those four pixels (separable Gaussian over a mirrored window),
    their differences, and the WWW (2013) averaging."""
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
        x1 = (s_tl - s_tr) * inv_h
        x2 = (s_bl - s_br) * inv_h
        y1 = (s_tl - s_bl) * inv_h
        y2 = (s_tr - s_br) * inv_h
        A += (1 - alpha) / 2 * (x1 * x1 + x2 * x2) + alpha * x1 * x2
        B += 0.25 * (x1 + x2) * (y1 + y2)
        C += (1 - alpha) / 2 * (y1 * y1 + y2 * y2) + alpha * y1 * y2
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
    """Tensorblur, then the diffusion tensor g(mu) along the tensor's eigenvectors
    (identity where the discriminant is below 1e-6), then the delta stencil's corner
    weights times tau / 2h^2: along rows, along columns, main and anti diagonal."""
    tiles = tl.cdiv(H + 1, BLOCK_R) * tl.cdiv(W + 1, BLOCK_C)
    n = (tl.program_id(0) // tiles).to(tl.int64)
    r, c, mask = _tile(tl.program_id(0) % tiles, H + 1, W + 1, BLOCK_R, BLOCK_C)
    corners = (H + 1) * (W + 1)
    plane = abc_ptr + n * 3 * corners
    A = _blur(plane, r, c, H + 1, W + 1, mask, taps_ptr, KSIZE, BLOCK_R, BLOCK_C)
    B = _blur(plane + corners, r, c, H + 1, W + 1, mask, taps_ptr, KSIZE, BLOCK_R, BLOCK_C)
    C = _blur(plane + 2 * corners, r, c, H + 1, W + 1, mask, taps_ptr, KSIZE, BLOCK_R, BLOCK_C)
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
    out = w_ptr + n * 4 * corners + r * (W + 1) + c
    tl.store(out, k * (At - delta), mask=mask)
    tl.store(out + corners, k * (Ct - delta), mask=mask)
    tl.store(out + 2 * corners, k * (delta + Bt), mask=mask)
    tl.store(out + 3 * corners, k * (delta - Bt), mask=mask)


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
    """Zalesak's factors of one channel: how much of its inflow (first plane) and outflow
    (second plane) each pixel can take and stay inside the channel's [lo, hi]."""
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
    lo = tl.load(lo_ptr + plane_id)
    hi = tl.load(hi_ptr + plane_id)
    room_up = tl.where(gain > 0, tl.minimum((hi - centre) / tl.where(gain > 0, gain, 1.0), 1.0), 1.0)
    room_down = tl.where(loss < 0, tl.minimum((lo - centre) / tl.where(loss < 0, loss, -1.0), 1.0), 1.0)
    out = rooms_ptr + plane_id * 2 * H * W + i * W + j
    tl.store(out, room_up, mask=mask)
    tl.store(out + H * W, room_down, mask=mask)


@triton.jit
def _update_kernel(u_ptr, w_ptr, rooms_ptr, out_ptr, H, W, LIMIT: tl.constexpr, BLOCK_R: tl.constexpr,
                   BLOCK_C: tl.constexpr):
    """One channel's explicit step: the eight fluxes into each pixel, each scaled (with
    ``LIMIT``) by the smaller room of the pixel it enters and the one it leaves."""
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
                    up_there = tl.load(rooms + at, mask=mask, other=0.0)
                    down_there = tl.load(rooms + H * W + at, mask=mask, other=0.0)
                    f = f * tl.where(f > 0, tl.minimum(up_here, down_there), tl.minimum(down_here, up_there))
                total += f
    tl.store(out_ptr + plane_id * H * W + i * W + j, centre + total, mask=mask)


class Stepper:
    """EED steps for a batch (N, 3, H, W) float32 CUDA tensor; buffers made once per batch size."""

    def __init__(self, height: int, width: int, params: EEDParams, device):
        import torch

        symmetric_index(height, params.kernel_size // 2 + 1)  # the same size checks as the other paths
        symmetric_index(width, params.kernel_size // 2 + 1)
        self.p, self.height, self.width, self.device = params, height, width, device
        self.taps = torch.as_tensor(gaussian_kernel_1d(params.kernel_size, params.sigma).astype(np.float32),
                                    device=device)
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
        p = self.p
        n, height, width = u.shape[0], self.height, self.width
        abc, weights, rooms, spare = self._buffers(n)
        spare = spare.view(u.shape)
        corner_tiles = triton.cdiv(height + 1, BLOCK_ROWS) * triton.cdiv(width + 1, BLOCK_COLS)
        pixel_tiles = triton.cdiv(height, BLOCK_ROWS) * triton.cdiv(width, BLOCK_COLS)
        tiles = dict(BLOCK_R=BLOCK_ROWS, BLOCK_C=BLOCK_COLS)
        lo, hi = (None, None) if bounds is None else (b.reshape(-1).contiguous() for b in bounds)
        for _ in range(steps):
            _tensor_kernel[(n * corner_tiles,)](u, abc, self.taps, height, width, p.alpha, 1 / p.h,
                                                KSIZE=p.kernel_size, **tiles)
            _weights_kernel[(n * corner_tiles,)](abc, weights, self.taps, height, width, p.alpha, p.contrast,
                                                 p.tau / (2 * p.h * p.h), KSIZE=p.kernel_size, **tiles)
            if bounds is not None:
                _rooms_kernel[(n * 3, pixel_tiles)](u, weights, rooms, lo, hi, height, width, **tiles)
            _update_kernel[(n * 3, pixel_tiles)](u, weights, rooms, spare, height, width,
                                                 LIMIT=bounds is not None, **tiles)
            u, spare = spare, u
        self.buffers[n] = (abc, weights, rooms, spare)
        return u
