"""EED steps on the CPU as one compiled loop nest per image (numba).

The batched torch form spends most of a step writing and re-reading whole-batch
temporaries. Here each image runs all its steps in one call, on one thread, with its
working planes (a few MB at 224x224) private and cache-resident: pre-smoothing,
structure tensor, tensorblur, diffusion tensor, the WWW (2013) delta-stencil weights,
fluxes and the Zalesak limiter are loops whose innermost axis is a row, which LLVM
vectorises. Images are independent, so a batch is spread over threads (as many as
torch uses, ``OMP_NUM_THREADS`` / ``torch.set_num_threads``; the compiled loops release
the GIL), and the result does not depend on how images are batched. The scheme is the
one documented in ``stimuli.eed``.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

from .eed_scheme import EEDParams, gaussian_kernel_1d, symmetric_index

NEIGHBOUR_ROWS = np.array([-1, -1, -1, 0, 0, 1, 1, 1])
NEIGHBOUR_COLS = np.array([-1, 0, 1, -1, 1, -1, 0, 1])
"""The eight neighbours of a pixel, in the order of ``_pixel_weights``' planes."""

_F32 = np.float32
_ONE, _ZERO = _F32(1.0), _F32(0.0)


@njit(cache=True, error_model="numpy")
def _pad(plane, rows, cols, out):
    """``out = plane[rows][:, cols]`` for symmetric padding by index lists
    (``symmetric_index``): the inner part of each row is a plain copy."""
    pad, width = (cols.shape[0] - plane.shape[1]) // 2, plane.shape[1]
    for i in range(rows.shape[0]):
        src, dst = plane[rows[i]], out[i]
        dst[pad:pad + width] = src
        for j in range(pad):
            dst[j] = src[cols[j]]
            dst[pad + width + j] = src[cols[pad + width + j]]


@njit(cache=True, error_model="numpy")
def _smooth(padded, taps, rowpass, out):
    """Separable Gaussian, 'valid' over ``padded``: rows first, then columns."""
    rows, width = out.shape
    rowpass[:] = 0
    for a in range(taps.shape[0]):
        for i in range(rows):
            src, dst = padded[i + a], rowpass[i]
            for j in range(padded.shape[1]):
                dst[j] += taps[a] * src[j]
    out[:] = 0
    for b in range(taps.shape[0]):
        for i in range(rows):
            src, dst = rowpass[i], out[i]
            for j in range(width):
                dst[j] += taps[b] * src[j + b]


@njit(cache=True, error_model="numpy")
def _structure_tensor(s, alpha, inv_h, abc):
    """Colour structure tensor (A, B, C) on the corner grid from the smoothed channels
    ``s`` (3, H+2, W+2), with the WWW (2013) averaging of the four corner differences."""
    half_rest = (_ONE - alpha) / _F32(2.0)
    quarter = _F32(0.25)
    abc[:] = 0
    for ch in range(s.shape[0]):
        for r in range(abc.shape[1]):
            top, bottom = s[ch, r], s[ch, r + 1]
            for c in range(abc.shape[2]):
                x1 = (top[c] - top[c + 1]) * inv_h
                x2 = (bottom[c] - bottom[c + 1]) * inv_h
                y1 = (top[c] - bottom[c]) * inv_h
                y2 = (top[c + 1] - bottom[c + 1]) * inv_h
                abc[0, r, c] += half_rest * (x1 * x1 + x2 * x2) + alpha * x1 * x2
                abc[1, r, c] += quarter * (x1 + x2) * (y1 + y2)
                abc[2, r, c] += half_rest * (y1 * y1 + y2 * y2) + alpha * y1 * y2


@njit(cache=True, error_model="numpy")
def _corner_weights(abc, alpha, contrast, k, wts):
    """Diffusion tensor g(mu) along the tensor's eigenvectors (identity where the
    discriminant is below 1e-6), turned into the delta stencil's corner weights times
    tau / 2h^2: along rows, along columns, main and anti diagonal (``wts`` (4, ...))."""
    two, four, tiny = _F32(2.0), _F32(4.0), _F32(1e-6)
    beta = _ONE - two * alpha
    for r in range(abc.shape[1]):
        for c in range(abc.shape[2]):
            a, b, cc = abc[0, r, c], abc[1, r, c], abc[2, r, c]
            d = np.sqrt(four * b * b + (a - cc) * (a - cc))
            q1 = (a + cc - d) / (two * contrast)
            q2 = (a + cc + d) / (two * contrast)
            g1 = _ONE / np.sqrt(_ONE + q1 * q1)
            g2 = _ONE / np.sqrt(_ONE + q2 * q2)
            flat = d < tiny
            at = _ONE if flat else ((a - cc + d) * g2 - (a - cc - d) * g1) / (two * d)
            ct = _ONE if flat else ((cc - a + d) * g2 - (cc - a - d) * g1) / (two * d)
            bt = _ZERO if flat else b * (g2 - g1) / d
            delta = alpha * (at + ct) + beta * abs(bt)
            wts[0, r, c] = k * (at - delta)
            wts[1, r, c] = k * (ct - delta)
            wts[2, r, c] = k * (delta + bt)
            wts[3, r, c] = k * (delta - bt)


@njit(cache=True, error_model="numpy")
def _pixel_weights(wts, w8):
    """Each pixel's eight neighbour weights from the four corners around it (a neighbour
    along a row or column shares two of them, a diagonal one shares one)."""
    row, col, main, anti = wts[0], wts[1], wts[2], wts[3]
    for i in range(w8.shape[1]):
        for j in range(w8.shape[2]):
            w8[0, i, j] = main[i, j]
            w8[1, i, j] = col[i, j] + col[i, j + 1]
            w8[2, i, j] = anti[i, j + 1]
            w8[3, i, j] = row[i, j] + row[i + 1, j]
            w8[4, i, j] = row[i, j + 1] + row[i + 1, j + 1]
            w8[5, i, j] = anti[i + 1, j]
            w8[6, i, j] = col[i + 1, j] + col[i + 1, j + 1]
            w8[7, i, j] = main[i + 1, j + 1]


@njit(cache=True, error_model="numpy")
def _rooms(padded, off, w8, lo, hi, gain, loss, rooms):
    """Zalesak's factors for one channel (pixel (i, j) at ``padded[off + i, off + j]``): how much of its inflow
    (``rooms[0]``) and outflow (``rooms[1]``) each pixel can take and stay inside
    [lo, hi]; written padded by 1 with the edge repeated, as neighbours read them.
    ``gain`` and ``loss`` are row buffers."""
    height, width = w8.shape[1], w8.shape[2]
    for i in range(height):
        centre = padded[off + i, off:off + width]
        gain[:] = 0
        loss[:] = 0
        for d in range(8):
            weights, other = w8[d, i], padded[off + i + NEIGHBOUR_ROWS[d], off + NEIGHBOUR_COLS[d]:]
            for j in range(width):
                f = weights[j] * (other[j] - centre[j])
                gain[j] += max(f, _ZERO)
                loss[j] += min(f, _ZERO)
        up_room, down_room = rooms[0, i + 1, 1:width + 1], rooms[1, i + 1, 1:width + 1]
        for j in range(width):
            up_room[j] = min((hi - centre[j]) / gain[j], _ONE) if gain[j] > _ZERO else _ONE
            down_room[j] = min((lo - centre[j]) / loss[j], _ONE) if loss[j] < _ZERO else _ONE
    for k in range(2):
        rooms[k, 0] = rooms[k, 1]
        rooms[k, height + 1] = rooms[k, height]
        for i in range(height + 2):
            rooms[k, i, 0] = rooms[k, i, 1]
            rooms[k, i, width + 1] = rooms[k, i, width]


@njit(cache=True, error_model="numpy")
def _update(padded, off, w8, rooms, limit, total, out):
    """One channel's explicit step: the eight fluxes into each pixel, each scaled (with
    ``limit``) by the smaller room of the pixel it enters and the one it leaves.
    ``total`` is a row buffer."""
    height, width = out.shape
    for i in range(height):
        centre = padded[off + i, off:off + width]
        up_room, down_room = rooms[0, i + 1, 1:width + 1], rooms[1, i + 1, 1:width + 1]
        total[:] = 0
        for d in range(8):
            y, x = i + 1 + NEIGHBOUR_ROWS[d], 1 + NEIGHBOUR_COLS[d]
            weights, other = w8[d, i], padded[off - 1 + y, off - 1 + x:]
            if limit:
                other_up, other_down = rooms[0, y, x:], rooms[1, y, x:]
                for j in range(width):
                    f = weights[j] * (other[j] - centre[j])
                    into = min(up_room[j], other_down[j])
                    out_of = min(down_room[j], other_up[j])
                    total[j] += f * (into if f > _ZERO else out_of)
            else:
                for j in range(width):
                    total[j] += weights[j] * (other[j] - centre[j])
        for j in range(width):
            out[i, j] = centre[j] + total[j]


@njit(cache=True, nogil=True, error_model="numpy")
def _diffuse_image(u, steps, lo, hi, limit, taps, alpha, contrast, inv_h, k, rows, cols, trows, tcols):
    """``steps`` EED steps of one image ``u`` (3, H, W), in place; ``rows``, ``cols``
    (``trows``, ``tcols``) pad the image (the corner tensor) for the Gaussian."""
    channels, height, width = u.shape
    padded = np.empty((channels, rows.shape[0], cols.shape[0]), _F32)
    rowpass = np.empty((height + 2, cols.shape[0]), _F32)
    s = np.empty((channels, height + 2, width + 2), _F32)
    abc = np.empty((3, height + 1, width + 1), _F32)
    tpadded = np.empty((trows.shape[0], tcols.shape[0]), _F32)
    trowpass = np.empty((height + 1, tcols.shape[0]), _F32)
    wts = np.empty((4, height + 1, width + 1), _F32)
    w8 = np.empty((8, height, width), _F32)
    rooms = np.ones((2, height + 2, width + 2), _F32)
    gain, loss, total = np.empty(width, _F32), np.empty(width, _F32), np.empty(width, _F32)
    off = (rows.shape[0] - height) // 2
    for _ in range(steps):
        for ch in range(channels):
            _pad(u[ch], rows, cols, padded[ch])
            _smooth(padded[ch], taps, rowpass, s[ch])
        _structure_tensor(s, alpha, inv_h, abc)
        for e in range(3):
            _pad(abc[e], trows, tcols, tpadded)
            _smooth(tpadded, taps, trowpass, abc[e])
        _corner_weights(abc, alpha, contrast, k, wts)
        _pixel_weights(wts, w8)
        for ch in range(channels):
            if limit:
                _rooms(padded[ch], off, w8, lo[ch], hi[ch], gain, loss, rooms)
            _update(padded[ch], off, w8, rooms, limit, total, u[ch])


class Stepper:
    """EED steps for a batch (N, 3, H, W) float32 CPU tensor, in place."""

    def __init__(self, height: int, width: int, params: EEDParams):
        self.p = params
        pad = params.kernel_size // 2 + 1  # reference: (k - 1) / 2 + 1
        self.rows, self.cols = symmetric_index(height, pad), symmetric_index(width, pad)
        self.trows, self.tcols = symmetric_index(height + 1, pad - 1), symmetric_index(width + 1, pad - 1)
        self.taps = gaussian_kernel_1d(params.kernel_size, params.sigma).astype(np.float32)

    def __call__(self, u, steps: int, bounds):
        """``u``, a CPU tensor, after ``steps`` steps of every image (updated in place);
        ``bounds`` (low, high), each (N, 3, 1, 1), turns on the limiter."""
        import torch

        p = self.p
        images = u.numpy()
        n = len(images)
        if bounds is None:
            lo = hi = np.zeros((n, 3), np.float32)
        else:
            lo, hi = (b.reshape(n, 3).numpy() for b in bounds)

        def run(i):
            _diffuse_image(images[i], steps, lo[i], hi[i], bounds is not None, self.taps, _F32(p.alpha),
                           _F32(p.contrast), _F32(1 / p.h), _F32(p.tau / (2 * p.h * p.h)), self.rows, self.cols,
                           self.trows, self.tcols)

        with ThreadPoolExecutor(max(1, min(n, torch.get_num_threads()))) as pool:
            list(pool.map(run, range(n)))
        return u
