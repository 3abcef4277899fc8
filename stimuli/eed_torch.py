"""EED steps in plain torch: the path for devices that neither the numba (CPU) nor the
Triton (CUDA) kernels serve.

The step is written as fluxes along the edges between neighbouring pixels (rows,
columns, both diagonals), which is the same linear map as the reference's nine-weight
form, conserves each channel's mean inside the image and gives the limiter its fluxes;
all images of a batch advance together as whole-batch tensor operations. The scheme is
the one documented in ``stimuli.eed``.
"""

from __future__ import annotations

import numpy as np

from .eed_scheme import EEDParams, gaussian_kernel_1d, symmetric_index

BYTES_PER_PIXEL = 240
"""Device memory per image pixel while stepping (about 12 MB per 224x224 image)."""


def _pad(x, rows, cols):
    """Pad the last two axes by gathering ``rows`` and ``cols`` (see ``symmetric_index``)."""
    return x.index_select(-2, rows).index_select(-1, cols)


class Stepper:
    """EED steps for a batch (N, 3, H, W) float32 on one device; constants built once."""

    def __init__(self, height: int, width: int, params: EEDParams, device):
        import torch

        self.p = params
        pad = params.kernel_size // 2 + 1  # reference: (k - 1) / 2 + 1
        self.pad_rows = torch.as_tensor(symmetric_index(height, pad), device=device)
        self.pad_cols = torch.as_tensor(symmetric_index(width, pad), device=device)
        # the tensor lives on (H+1) x (W+1) corners and is padded by pad - 1 for tensorblur
        self.tpad_rows = torch.as_tensor(symmetric_index(height + 1, pad - 1), device=device)
        self.tpad_cols = torch.as_tensor(symmetric_index(width + 1, pad - 1), device=device)
        self.one_rows = torch.as_tensor(symmetric_index(height, 1), device=device)
        self.one_cols = torch.as_tensor(symmetric_index(width, 1), device=device)
        self.kernel = [float(v) for v in gaussian_kernel_1d(params.kernel_size, params.sigma).astype(np.float32)]

    def _smooth(self, x):
        """Separable Gaussian, 'valid' over already padded planes (..., H', W'), as sums of
        shifted slices: on CPU this is several times faster than a one-channel conv2d."""
        k = self.kernel
        rows = x.shape[-2] - len(k) + 1
        y = k[0] * x[..., 0:rows, :]
        for i in range(1, len(k)):
            y = y + k[i] * x[..., i:i + rows, :]
        cols = x.shape[-1] - len(k) + 1
        z = k[0] * y[..., 0:cols]
        for i in range(1, len(k)):
            z = z + k[i] * y[..., i:i + cols]
        return z

    def diffusion_tensor(self, u):
        """(A', B', C') on the corner grid, each (N, H+1, W+1)."""
        import torch

        p = self.p
        s = self._smooth(_pad(u, self.pad_rows, self.pad_cols)) / p.h  # (N, 3, H+2, W+2)
        x1 = s[:, :, :-1, :-1] - s[:, :, :-1, 1:]
        x2 = s[:, :, 1:, :-1] - s[:, :, 1:, 1:]
        y1 = s[:, :, :-1, :-1] - s[:, :, 1:, :-1]
        y2 = s[:, :, :-1, 1:] - s[:, :, 1:, 1:]
        a = p.alpha
        A = ((1 - a) / 2 * (x1 * x1 + x2 * x2) + a * x1 * x2).sum(1)
        C = ((1 - a) / 2 * (y1 * y1 + y2 * y2) + a * y1 * y2).sum(1)
        B = (0.25 * (x1 + x2) * (y1 + y2)).sum(1)
        abc = _pad(torch.stack((A, B, C), 1), self.tpad_rows, self.tpad_cols)
        A, B, C = self._smooth(abc).unbind(1)
        D = torch.sqrt(4 * B * B + (A - C) ** 2)
        flat = D < 1e-6
        g1 = torch.rsqrt(1 + ((A + C - D) / (2 * p.contrast)) ** 2)
        g2 = torch.rsqrt(1 + ((A + C + D) / (2 * p.contrast)) ** 2)
        Dsafe = torch.where(flat, torch.ones_like(D), D)
        At = torch.where(flat, 1.0, ((A - C + D) * g2 - (A - C - D) * g1) / (2 * Dsafe))
        Ct = torch.where(flat, 1.0, ((C - A + D) * g2 - (C - A - D) * g1) / (2 * Dsafe))
        Bt = torch.where(flat, 0.0, B * (g2 - g1) / Dsafe)
        return At, Bt, Ct

    def __call__(self, u, steps: int, bounds):
        """``u`` after ``steps`` steps; ``bounds`` (low, high), each (N, 3, 1, 1), turns on
        the limiter."""
        for _ in range(steps):
            u = self.step(u, bounds)
        return u

    def step(self, u, bounds=None):
        """One explicit step u + tau div(D grad u), as fluxes along the edges between
        neighbouring pixels (each flux counted into one pixel and out of the other);
        ``bounds`` (low, high), each (N, 3, 1, 1), turns on the limiter."""
        p = self.p
        At, Bt, Ct = self.diffusion_tensor(u)
        k = p.tau / (2 * p.h * p.h)
        delta = p.alpha * (At + Ct) + (1 - 2 * p.alpha) * Bt.abs()
        w_row, w_col = k * (At - delta), k * (Ct - delta)
        # the padded grid (H+2, W+2); corner (r, c) sits between pixels (r..r+1, c..c+1)
        w_h = (w_row[:, :-1] + w_row[:, 1:]).unsqueeze(1)  # edges (r, c)-(r, c+1), real rows
        w_v = (w_col[:, :, :-1] + w_col[:, :, 1:]).unsqueeze(1)  # edges (r, c)-(r+1, c), real columns
        w_main = (k * (delta + Bt)).unsqueeze(1)  # edges (r, c)-(r+1, c+1)
        w_anti = (k * (delta - Bt)).unsqueeze(1)  # edges (r, c+1)-(r+1, c)
        up = _pad(u, self.one_rows, self.one_cols)
        inner, head, tail = slice(1, -1), slice(None, -1), slice(1, None)
        fluxes = [  # (flux into the first pixel, out of the second; where the two pixels are)
            (w_h * (up[:, :, inner, tail] - up[:, :, inner, head]), (inner, head), (inner, tail)),
            (w_v * (up[:, :, tail, inner] - up[:, :, head, inner]), (head, inner), (tail, inner)),
            (w_main * (up[:, :, tail, tail] - up[:, :, head, head]), (head, head), (tail, tail)),
            (w_anti * (up[:, :, tail, head] - up[:, :, head, tail]), (head, tail), (tail, head)),
        ]
        if bounds is not None:
            fluxes = self._limit(u, bounds, fluxes)
        flows = [f for f, _, _ in fluxes]
        return u + _net(flows, flows)

    def _limit(self, u, bounds, fluxes):
        """Scale each flux by the largest factor in [0, 1] that keeps both its pixels inside
        ``bounds``, each channel's input range (Zalesak 1979's flux-corrected-transport
        limiter with global bounds). Fluxes stay antisymmetric, so means are kept; a factor
        is below 1 only at a pixel whose inflows (or outflows) alone would carry it out of
        the range."""
        import torch

        flows = [f for f, _, _ in fluxes]
        gain = _net([f.clamp(min=0) for f in flows], [f.clamp(max=0) for f in flows])
        loss = _net(flows, flows) - gain
        lo, hi = bounds
        room_up = torch.where(gain > 0, (hi - u) / gain, 1.0).clamp(max=1.0)
        room_down = torch.where(loss < 0, (lo - u) / loss, 1.0).clamp(max=1.0)
        r_up = _pad(room_up, self.one_rows, self.one_cols)
        r_down = _pad(room_down, self.one_rows, self.one_cols)
        limited = []
        for flux, first, second in fluxes:
            into = torch.minimum(r_up[(..., *first)], r_down[(..., *second)])
            out_of = torch.minimum(r_down[(..., *first)], r_up[(..., *second)])
            limited.append((flux * torch.where(flux > 0, into, out_of), first, second))
        return limited


def _net(into_first, out_of_second):
    """Per real pixel, ``into_first`` summed over the edges it is the first pixel of, minus
    ``out_of_second`` summed over those it is the second of (edges horizontal, vertical,
    main and anti-diagonal, as built in ``Stepper.step``)."""
    h, v, main, anti = into_first
    h2, v2, main2, anti2 = out_of_second
    return (h[..., 1:] - h2[..., :-1] + v[..., 1:, :] - v2[..., :-1, :]
            + main[..., 1:, 1:] - main2[..., :-1, :-1] + anti[..., 1:, :-1] - anti2[..., :-1, 1:])
