"""Observers the papers used beyond ImageNet classifiers: zero-shot CLIP over the experiment's own labels
(open_clip) and feature-only self-supervised ViTs (DINO, MAE) for DiST, built here with random weights."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from cuebench.expdir import ExperimentDir
from cuebench.responses import ResponseStore
from cuebench.trials import NOT_CLEAR
from stimuli.web_sample import build_sample_experiment

ARCH = "ViT-S-32"  # a small open_clip architecture (63M parameters) with the CLIP tokenizer; random weights
PROMPTS = ("a photo of a {label}.", "a drawing of a {label}.", "a {label} in a video game.")


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    root = tmp_path_factory.mktemp("vlm") / "sample"
    return root, build_sample_experiment(root)


def needs_open_clip():
    """Skip without open_clip (the `clip` extra); imported after torch_compat, as the observer imports it."""
    from model_eval.torch_compat import import_timm

    import_timm()
    pytest.importorskip("open_clip")


@pytest.fixture(scope="module")
def three_prompts():
    """A CLIP observer of three prompts on ARCH with random weights (seed 0); its open_clip model and tokenizer
    are also the test's reference, called directly (the same weights as the `random` of a subprocess)."""
    needs_open_clip()
    from model_eval.observers.clip_models import ClipObserver, import_open_clip

    class Prompts(ClipObserver):
        templates = PROMPTS

    observer = Prompts.from_spec("clip-3", f"{ARCH}:random", "cpu")
    return observer, observer.model, import_open_clip().get_tokenizer(ARCH)


def pixels(path: Path, config: dict):
    """A stimulus as a model sees it under --policy as-is: [0, 1], normalised with the ``mean`` and ``std``."""
    import torch

    x = torch.from_numpy(np.asarray(Image.open(path).convert("RGB"), dtype=np.float32) / 255.0).permute(2, 0, 1)
    mean, std = (torch.tensor(config[k]).view(3, 1, 1) for k in ("mean", "std"))
    return ((x - mean) / std)[None]


def zero_shot_by_hand(model, tokenizer, images, labels, prompts):
    """CLIP's zero-shot classifier (Radford et al. 2021, Sec. 3.1.4): per label, the prompts' unit text
    embeddings averaged and renormalised; softmax of exp(logit_scale) x cosine with the unit image embedding."""
    import torch

    with torch.no_grad():
        text = []
        for label in labels:
            e = model.encode_text(tokenizer([p.format(label=label.replace("_", " ")) for p in prompts]))
            e = e / e.norm(dim=-1, keepdim=True)
            text.append(e.mean(0) / e.mean(0).norm())
        image = model.encode_image(images)
        cosine = (image / image.norm(dim=-1, keepdim=True)) @ torch.stack(text).T
        return cosine.numpy(), (model.logit_scale.exp() * cosine).softmax(-1).numpy()


@pytest.mark.slow
@pytest.mark.validates("zero-shot CLIP decision over the experiment's labels",
                       definition="answer = argmax over the trial's choices of cos(image, normalise(mean_t normalise("
                                  "text(template_t(label))))); probabilities = softmax(exp(logit_scale) x cosine)",
                       source="Radford et al. 2021, Sec. 3.1.4 (prompt ensembling)",
                       reference="open_clip's encoders called directly in the test, the ensemble written out",
                       tolerance="same answer on every classification trial; probabilities within 1e-4")
def test_clip_answers_an_experiment_with_its_own_labels_as_computed_by_hand(sample, three_prompts, tmp_path):
    root, experiment = sample
    observer, model, tokenizer = three_prompts
    labels = tuple(label for label in experiment.label_set.labels if label != NOT_CLEAR)
    folder = ExperimentDir(root)
    classify = [t for t in experiment.trials if t.trial_type == "classify"]
    clip_config = {"mean": model.visual.image_mean, "std": model.visual.image_std}  # open_clip's, not ours
    images = {s: pixels(folder.stimulus_path(experiment.stimuli[s]), clip_config) for t in classify for s in t.stimuli}

    # the documented command, from the experiment's parent folder, one template: "a photo of a {label}."
    done = subprocess.run([sys.executable, "-m", "cuebench", "eval", "--model", f"clip-photo:{ARCH}:random",
                           "--experiment", root.name, "--quiet"], cwd=root.parent, env={**os.environ, "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    with ResponseStore(folder.responses_file) as store:
        rows = {r["trial_id"]: r for r in store.rows()}
    assert len(rows) == len(experiment.trials)  # the oddity trials too, from the image embeddings
    import torch

    cosine, probs = zero_shot_by_hand(model, tokenizer, torch.cat(list(images.values())), labels,
                                      ("a photo of a {label}.",))
    row_of = {s: k for k, s in enumerate(images)}
    for trial in classify:
        row, k = rows[trial.trial_id], row_of[trial.stimuli[0]]
        choices = [c for c in trial.choices if c != NOT_CLEAR]
        best = max(choices, key=lambda c: (cosine[k, labels.index(c)], -choices.index(c)))
        assert (row["observer"], row["decision_rule"], row["response"]) == (f"clip-photo:{ARCH}:random",
                                                                            "16class-mean", best)
        assert row["model_outputs"] == pytest.approx({c: probs[k, labels.index(c)] for c in choices}, abs=1e-4)
        assert row["device"]["mapping"] == f"observer:clip-photo:{ARCH}:random"

    # an ensemble of templates, set by a subclass, in-process
    observer.prepare(experiment)
    assert observer.classes == labels
    got = observer.probabilities(torch.cat(list(images.values()))).numpy()
    _, expected = zero_shot_by_hand(model, tokenizer, torch.cat(list(images.values())), labels, PROMPTS)
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert (got.argmax(1) == expected.argmax(1)).all()


def test_clip_specs_are_checked_before_any_model_is_built():
    needs_open_clip()
    from model_eval.models import UnknownArchitecture, WeightsNotFound
    from model_eval.observers.clip_models import ClipObserver

    with pytest.raises(UnknownArchitecture, match="needs an open_clip architecture and weights: clip:ARCH:WEIGHTS"):
        ClipObserver.from_spec("clip", "ViT-B-32", "cpu")
    with pytest.raises(UnknownArchitecture, match="did you mean ViT-B-32"):
        ClipObserver.from_spec("clip", "ViT-B-23:random", "cpu")
    with pytest.raises(WeightsNotFound, match="neither a file nor an open_clip pretrained tag"):
        ClipObserver.from_spec("clip", "ViT-B-32:no-such-file.bin", "cpu")


def odd_one_by_hand(features: np.ndarray) -> str:
    """DiST's rule written out (Wen et al. 2024, Eq. 2): z-score each vector, 1 - cosine, the largest mean distance."""
    z = [(f - f.mean()) / f.std() for f in features]
    distance = [[1 - float(a @ b) / (np.linalg.norm(a) * np.linalg.norm(b)) for b in z] for a in z]
    return str(int(np.argmax([sum(row) / 2 for row in distance])) + 1)


@pytest.mark.slow
def test_self_supervised_vit_answers_oddity_from_its_final_cls_token_and_refuses_classification(sample, tmp_path):
    import torch

    from model_eval.decisions import DecisionTable
    from model_eval.models import ModelError
    from model_eval.observers import load_observer
    from model_eval.observers.self_supervised import FeatureOnlyObserver
    from model_eval.torch_compat import import_timm

    name = "vit_small_patch16_224.dino"
    torch.manual_seed(0)
    model = import_timm().create_model(name, pretrained=False).eval()
    torch.save(model.state_dict(), tmp_path / "dino.pth")
    observer = load_observer(f"{name}:{tmp_path / 'dino.pth'}", "cpu")
    assert isinstance(observer, FeatureOnlyObserver) and observer.observer_id.startswith(f"{name}:file-")

    root, experiment = sample
    decisions = DecisionTable.choose(None, {"classify", "oddity"}).prepared(observer, experiment)
    folder = ExperimentDir(root)
    for trial in [t for t in experiment.trials if t.trial_type == "oddity"]:
        batch = torch.cat([pixels(folder.stimulus_path(experiment.stimuli[s]), observer.data_config)
                           for s in trial.stimuli])
        with torch.no_grad():
            cls_token = model.forward_features(batch)[:, 0].numpy()  # after the final norm
        features = observer.outputs(batch, frozenset({"features"}))["features"].numpy()
        np.testing.assert_allclose(features, cls_token, atol=1e-4)
        [decision] = observer.answer([trial], {"features": dict(zip(trial.stimuli, features))}, decisions)
        assert decision.response == odd_one_by_hand(cls_token.astype(np.float64))
    with pytest.raises(ModelError, match="self-supervised and has no classifier: it gives features only"):
        observer.probabilities(batch)
