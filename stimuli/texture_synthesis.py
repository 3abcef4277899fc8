"""Gram-matrix texture synthesis (Gatys, Ecker & Bethge 2015), as DiST uses it to break
global structure while keeping local texture (Wen et al. 2024, Sec. 3, Eq. 1).

An image starts as Gaussian noise and is optimised so that, at several layers of a
feature CNN, its Gram matrices (channel-by-channel dot products, which discard where a
feature occurs) match those of the original. Many images are synthesised in one batch,
but each image has its own loss, its own noise (from its own seed) and, with L-BFGS,
its own curvature history and step length -- so a batch gives the same images as
synthesising them one at a time, and the result depends only on the image and its seed.

A synthesis **step** is one iteration of the optimiser: one gradient of the Gram loss and, with
L-BFGS, its backtracking line search (with Adam, one update). It is the one meaning of "step" in
cuebench: ``stimuli build --design dist --synthesis-steps`` and ``train-cues --synthesis-steps``
both count it. Wen et al. count "optimization steps" of their own (100 for DiST, 10 for
DiSTinguish-A); ``STEPS_PER_DIST_STEP`` says how many of ours one of theirs is taken to be.

torch is imported inside functions only, so ``stimuli`` stays importable without it. The
feature network is handed in (a ``FeatureNet`` around any torch module): loading weights
is ``model_eval``'s job, and the app layer (``cuebench_app.feature_nets.load_feature_net``)
wires the two together, so ``stimuli`` never imports an observer package.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Protocol

import numpy as np

from cuebench.errors import CuebenchError

if TYPE_CHECKING:
    import torch

DEFAULT_FEATURE_NET = "tf_efficientnet_lite0"
DEFAULT_STEPS = 100
"""Synthesis steps of ``--design dist`` unless given: textures from 0.1-scaled noise (``NOISE_SCALE``)."""
STEPS_PER_DIST_STEP = 20
"""Synthesis steps in one of DiST's "optimization steps", *inferred from the paper's timing*, not taken
from the authors' code (their public repository holds the evaluation, not the synthesis). Wen et al.
(2024, App. A.2) report "above 55 s" per 100 steps for one 224 px image on a V100: far more than 100
VGG-19 gradients take, as expected when one step is one call of PyTorch's ``LBFGS.step(closure)``,
which runs up to ``max_iter`` = 20 iterations. So DiST's 100 steps are 2,000 of ours, DiSTinguish-A's
10 are 200."""
OPTIMIZERS = ("lbfgs", "adam")
ADAM_LR = 0.02
"""Adam step in [0, 1] pixel units; L-BFGS needs none (it scales its own steps)."""
LBFGS_HISTORY = 20
NOISE_SCALE = 0.1
"""Start noise std as a multiple of the network's input std. Low, because the stride-2 stem of
EfficientNet-Lite barely sees pixel-level noise: from unit noise (1.0) 100 L-BFGS steps leave
the images speckled (uncapped LV ratios 1.5-10 on the scikit-image photos); from 0.1 they are
textures with LV and HFE ratios near 1 (docs/dist.md)."""

FEATURE_LAYERS: dict[str, tuple[str, ...]] = {
    # Gatys et al. 2015: conv1_1 (after its ReLU), pool1, pool2, pool3, pool4 of VGG-19.
    "vgg19": ("features.1", "features.4", "features.9", "features.18", "features.27"),
    # The same ladder of strides (2, 2, 4, 8, 16) in EfficientNet-Lite: the stem (after its
    # BN+ReLU6), then the ends of stages 1, 2, 3 and 5 (timm's feature_info modules).
    "tf_efficientnet_lite0": ("bn1", "blocks.0", "blocks.1", "blocks.2", "blocks.4"),
    "tf_efficientnet_lite1": ("bn1", "blocks.0", "blocks.1", "blocks.2", "blocks.4"),
    "tf_efficientnet_lite2": ("bn1", "blocks.0", "blocks.1", "blocks.2", "blocks.4"),
}
"""Default layer set per architecture; every layer has weight 1/len(layers) (Gatys et al.
2015 weight the layers they use equally). Any other timm CNN: pass ``layers=``, module
names as in ``model.named_modules()``."""

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class SynthesisError(CuebenchError):
    """Synthesis cannot run as asked (unknown layers, bad option, diverged optimisation)."""


@dataclass
class SynthesisResult:
    """Synthesised images (N x H x W x 3 uint8) and each image's final matching loss."""

    images: np.ndarray
    losses: np.ndarray


class _EnoughLayers(Exception):
    """Raised by the last hooked layer: nothing after it is needed, so the forward pass stops."""


class FeatureNet:
    """A frozen CNN that returns the activations of named layers for [0, 1] RGB input."""

    def __init__(self, model, layers: tuple[str, ...], mean, std, name: str, source: str):
        import torch

        modules = dict(model.named_modules())
        unknown = [name for name in layers if name not in modules]
        if unknown:
            raise SynthesisError(f"feature network {name!r} has no layer(s) {', '.join(unknown)}; "
                                 f"its modules include {', '.join(list(modules)[1:12])} ...")
        self.model = model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.layers = tuple(layers)
        self.name, self.source = name, source
        device = next(model.parameters()).device
        self.mean = torch.tensor(mean, device=device).view(1, 3, 1, 1)
        self.std = torch.tensor(std, device=device).view(1, 3, 1, 1)
        self._captured: list = []
        for layer in layers:
            modules[layer].register_forward_hook(self._capture(layer == layers[-1]))

    @property
    def device(self):
        return self.mean.device

    def _capture(self, last: bool) -> Callable:
        def hook(module, inputs, output):
            self._captured.append(output)
            if last:
                raise _EnoughLayers

        return hook

    def __call__(self, images01):
        self._captured = []
        try:
            self.model((images01 - self.mean) / self.std)
        except _EnoughLayers:
            pass
        features, self._captured = self._captured, []
        return features


class FeatureNetLoader(Protocol):
    """What synthesis needs from whoever loads weights: ``(spec, device, layers) -> FeatureNet``."""

    def __call__(self, spec: str, device: str, layers: tuple[str, ...] | None = None) -> FeatureNet: ...


def gram_matrices(features: list) -> list:
    """Per-image Gram matrix of each layer, normalised by channels x positions.

    Gatys et al. 2015, Eq. 1-4: G^l = F^l F^l^T and E_l = 1/(4 N_l^2 M_l^2) sum (G - A)^2;
    dividing G by N_l M_l here makes E_l = 1/4 sum (G - A)^2 of the normalised matrices.
    """
    grams = []
    for f in features:
        b, c, h, w = f.shape
        flat = f.reshape(b, c, h * w)
        grams.append(flat @ flat.transpose(1, 2) / (c * h * w))
    return grams


def gram_loss(grams: list, targets: list, weights: tuple[float, ...]) -> "torch.Tensor":
    """Per-image loss sum_l w_l E_l (Gatys et al. 2015, Eq. 5): a tensor of shape (batch,)."""
    return sum(w * 0.25 * ((g - t) ** 2).sum(dim=(1, 2)) for g, t, w in zip(grams, targets, weights))


def to_tensor(images: np.ndarray, device) -> "torch.Tensor":
    """N x H x W x 3 uint8 -> N x 3 x H x W float32 in [0, 1]."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(images)).to(device).permute(0, 3, 1, 2).float() / 255.0


def to_uint8(images) -> np.ndarray:
    """N x 3 x H x W float in [0, 1] (values outside are clipped) -> N x H x W x 3 uint8."""
    array = images.detach().clamp(0, 1).mul(255).round().to("cpu").permute(0, 2, 3, 1).numpy()
    return np.ascontiguousarray(array.astype(np.uint8))


def gaussian_noise(shape: tuple[int, ...], seeds: list[int], mean, std, device) -> "torch.Tensor":
    """One Gaussian noise image per seed, each drawn from its own generator on the CPU (so
    a seed gives the same start on every device and in every batch)."""
    import torch

    mean = torch.as_tensor(mean, dtype=torch.float32).reshape(-1, 1, 1)
    std = torch.as_tensor(std, dtype=torch.float32).reshape(-1, 1, 1)
    noise = [torch.randn(shape, generator=torch.Generator().manual_seed(int(seed))) for seed in seeds]
    return (torch.stack(noise) * std + mean).to(device)


def optimise(objective: Callable, start, steps: int, optimizer: str = "lbfgs", progress=None):
    """Minimise a per-image objective from ``start``: ``objective(x, index) -> (len(index),)``
    gives the objective of images ``x`` that are the batch's images ``index`` (so a line
    search can re-evaluate just the images still searching).

    Returns the optimised batch and each image's final objective. Images never interact:
    Adam updates every pixel from its own gradient history, and the L-BFGS here keeps a
    separate history and step length per image (``torch.optim.LBFGS`` would treat the
    batch as one problem, so a batch's images would depend on each other).
    """
    if optimizer not in OPTIMIZERS:
        raise SynthesisError(f"unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZERS)}")
    if steps < 1:
        raise SynthesisError(f"synthesis needs at least 1 step, got {steps}")
    run = _batched_lbfgs if optimizer == "lbfgs" else _adam
    x, losses = run(objective, start, steps, progress)
    if not bool(losses.isfinite().all()):
        raise SynthesisError("texture synthesis diverged (non-finite loss); try --synthesis-optimizer adam")
    return x, losses


def _value_and_grad(objective: Callable, x, index):
    import torch

    x = x.detach().requires_grad_(True)
    values = objective(x, index)
    (grad,) = torch.autograd.grad(values.sum(), x)
    return values.detach(), grad.detach()


def _adam(objective: Callable, start, steps: int, progress):
    import torch

    x = start.detach().clone().requires_grad_(True)
    everyone = torch.arange(len(x), device=x.device)
    opt = torch.optim.Adam([x], lr=ADAM_LR)
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        objective(x, everyone).sum().backward()
        opt.step()
        if progress is not None:
            progress.update(1)
    with torch.no_grad():
        return x.detach(), objective(x, everyone).detach()


def _batched_lbfgs(objective: Callable, start, steps: int, progress, armijo: float = 1e-4,
                   max_halvings: int = 12):
    """L-BFGS (Nocedal & Wright 2006, Alg. 7.4/7.5) run on every image of the batch at once,
    each with its own (s, y) history and its own backtracking (Armijo) step length; a
    halved step re-evaluates only the images whose step was not yet accepted."""
    import torch

    shape = start.shape
    batch = shape[0]
    x = start.detach().reshape(batch, -1).clone()
    image_shape = shape[1:]
    everyone = torch.arange(batch, device=x.device)
    f, g = _value_and_grad(lambda v, i: objective(v.reshape(len(i), *image_shape), i), x, everyone)
    history: list[tuple] = []
    for _ in range(steps):
        direction = -_two_loop(g, history)
        slope = (g * direction).sum(1)
        uphill = slope >= 0
        if bool(uphill.any()):  # a stale history pointed uphill: fall back to steepest descent
            direction[uphill] = -g[uphill]
            slope = (g * direction).sum(1)
        step = torch.ones(batch, device=x.device)
        if not history:
            step = torch.clamp(1.0 / g.abs().sum(1), max=1.0)  # torch's LBFGS first step
        new_x, new_f, new_g = x.clone(), f.clone(), g.clone()
        pending = torch.ones(batch, dtype=torch.bool, device=x.device)
        for _ in range(max_halvings):
            index = pending.nonzero().squeeze(1)
            trial = x[index] + step[index, None] * direction[index]
            tf, tg = _value_and_grad(lambda v, i: objective(v.reshape(len(i), *image_shape), i), trial, index)
            ok = tf <= f[index] + armijo * step[index] * slope[index]
            accepted = index[ok]
            new_x[accepted], new_f[accepted], new_g[accepted] = trial[ok], tf[ok], tg[ok]
            pending[accepted] = False
            if not bool(pending.any()):
                break
            step = torch.where(pending, step / 2, step)
        s, y = new_x - x, new_g - g
        history = (history + [(s, y, (s * y).sum(1))])[-LBFGS_HISTORY:]
        x, f, g = new_x, new_f, new_g
        if progress is not None:
            progress.update(1)
    return x.reshape(shape), f


def _two_loop(grad, history: list[tuple]):
    """H_k grad by the two-loop recursion, per image; pairs with s.y <= 0 are skipped."""
    import torch

    q = grad.clone()
    alphas = []
    for s, y, sy in reversed(history):
        rho = torch.where(sy > 1e-10, 1.0 / sy.clamp(min=1e-10), torch.zeros_like(sy))
        alpha = rho * (s * q).sum(1)
        q -= alpha[:, None] * y
        alphas.append((rho, alpha))
    if history:
        s, y, sy = history[-1]
        yy = (y * y).sum(1)
        gamma = torch.where((sy > 1e-10) & (yy > 0), sy / yy.clamp(min=1e-30), torch.ones_like(sy))
        q *= gamma[:, None]
    for (s, y, _), (rho, alpha) in zip(history, reversed(alphas)):
        beta = rho * (y * q).sum(1)
        q += (alpha - beta)[:, None] * s
    return q


def synthesize(images: np.ndarray, seeds: list[int], net: FeatureNet, steps: int = DEFAULT_STEPS,
               optimizer: str = "lbfgs", progress=None, noise_scale: float = NOISE_SCALE) -> SynthesisResult:
    """Gram-matrix texture synthesis of a batch: N x H x W x 3 uint8 originals, one seed each.

    Starts from Gaussian noise with the network's input mean and standard deviation (i.e.
    standard normal noise in the network's normalised input space), times ``noise_scale``.
    """
    import torch

    images = np.asarray(images)
    if images.ndim != 4 or images.shape[-1] != 3 or images.dtype != np.uint8:
        raise SynthesisError(f"expected N x H x W x 3 uint8 images, got {images.shape} {images.dtype}")
    if len(seeds) != len(images):
        raise SynthesisError(f"{len(images)} images but {len(seeds)} seeds")
    weights = (1.0 / len(net.layers),) * len(net.layers)
    with full_float32():
        with torch.no_grad():
            targets = gram_matrices(net(to_tensor(images, net.device)))
        start = gaussian_noise((3, *images.shape[1:3]), seeds,
                               net.mean.flatten().cpu(), noise_scale * net.std.flatten().cpu(), net.device)
        x, losses = optimise(lambda x, index: gram_loss(gram_matrices(net(x)), [t[index] for t in targets],
                                                        weights), start, steps, optimizer, progress)
    return SynthesisResult(to_uint8(x), losses.cpu().numpy().astype(np.float64))


def full_float32():
    """cuDNN convolutions in true float32 while synthesising. torch lets cuDNN use TF32 (10-bit mantissa) by
    default, and L-BFGS amplifies that rounding: 5 steps on an H100 gave images up to 24 grey levels from the
    CPU's for the same seed. A stimulus must depend on its image and seed, not on the machine that made it."""
    import torch

    cudnn = torch.backends.cudnn
    return cudnn.flags(enabled=cudnn.enabled, benchmark=cudnn.benchmark, deterministic=cudnn.deterministic,
                       allow_tf32=False)
