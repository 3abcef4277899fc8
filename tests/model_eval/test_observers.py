"""The Observer protocol: a plug-in observer from an entry point answers a DiST and a suppression
experiment through ``cuebench eval``; torchvision models from the torch hub cache or a checkpoint;
decision rules dispatched by trial type from one registry."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from cuebench_app.cli import main
from cuebench.expdir import ExperimentDir
from cuebench.responses import ResponseStore
from cuebench.trials import NOT_CLEAR
from support import dist_subset, observer_example, plugin_package

DIST_TRIPLETS = 4



@pytest.fixture(scope="module")
def toy_package(tmp_path_factory):
    """A package installed only by being on PYTHONPATH: its dist-info names the entry point."""
    return plugin_package(tmp_path_factory.mktemp("toy"), "toyobserver",
                          {"cuebench.observers": {"toy-first": "toy_observer:FirstLabel"}},
                          {"toy_observer.py": observer_example()})


def cuebench(package, *args: str) -> subprocess.CompletedProcess:
    paths = [str(package), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, paths)), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "cuebench", *args], env=env, capture_output=True, text=True,
                          timeout=300)


def stored_rows(root) -> dict[str, dict]:
    with ResponseStore(ExperimentDir(root).responses_file) as store:
        return {r["trial_id"]: r for r in store.rows()}


def mean_colour(path) -> np.ndarray:
    return np.asarray(Image.open(path).convert("RGB"), dtype=np.float64).mean(axis=(0, 1)) / 255.0


def odd_one_by_hand(colours: np.ndarray) -> str:
    """DiST's rule written out for three 3-vectors: z-score each, 1 - cosine, mean over the other two."""
    z = [(c - c.mean()) / c.std() for c in colours]
    distance = [[1 - float(a @ b) / (np.linalg.norm(a) * np.linalg.norm(b)) for b in z] for a in z]
    mean = [sum(distance[i][j] for j in range(3) if j != i) / 2 for i in range(3)]
    return str(int(np.argmax(mean)) + 1)


@pytest.mark.slow
@pytest.mark.shared
def test_entry_point_observer_answers_dist_and_suppression(shared, toy_package, tmp_path):
    listed = cuebench(toy_package, "list", "observers")
    assert listed.returncode == 0
    assert "toy-first" in listed.stdout and "Always the label that sorts first" in listed.stdout

    source = dist_subset(shared / "data/dist", tmp_path / "dist", DIST_TRIPLETS)
    dist = tmp_path / "dist-exp"
    assert main(["stimuli", "build", "--design", "dist-import", "--images", str(source), "--out", str(dist),
                 "--workers", "1"]) == 0
    done = cuebench(toy_package, "eval", "--model", "toy-first", "--experiment", str(dist), "--quiet")
    assert done.returncode == 0, done.stderr
    experiment = ExperimentDir(dist).load()
    rows = stored_rows(dist)
    assert len(rows) == len(experiment.trials) == DIST_TRIPLETS
    for trial in experiment.trials:
        paths = [ExperimentDir(dist).stimulus_path(experiment.stimuli[s]) for s in trial.stimuli]
        colours = np.stack([mean_colour(path) for path in paths])
        row = rows[trial.trial_id]
        assert (row["observer"], row["decision_rule"]) == ("toy-first:none", "oddity")
        assert row["response"] == odd_one_by_hand(colours)
        assert row["correct"] == int(row["response"] == trial.correct)
        assert row["device"]["model"] == "toy-first" and row["device"]["mapping"] is None

    suppression = tmp_path / "suppression"
    assert main(["stimuli", "build", "--design", "suppression", "--conditions", "grayscale",
                 "--out", str(suppression), "--workers", "1"]) == 0
    done = cuebench(toy_package, "eval", "--model", "toy-first:v2", "--experiment", str(suppression), "--quiet",
                    "--rule", "16class-burgert")
    assert done.returncode == 0, done.stderr
    experiment = ExperimentDir(suppression).load()
    rows = stored_rows(suppression)
    assert len(rows) == len(experiment.trials)
    first = min(label for label in experiment.label_set.labels if label != NOT_CLEAR)
    for trial in experiment.trials:
        row = rows[trial.trial_id]
        assert (row["observer"], row["decision_rule"]) == ("toy-first:v2", "16class-burgert")
        assert row["response"] == first  # its probability is 1 > 0.5, every other label's is 0
        assert row["model_outputs"] == {c: float(c == first) for c in trial.choices if c != NOT_CLEAR}
        assert row["correct"] == int(trial.correct == first)
        assert row["device"]["mapping"] == "observer:toy-first:v2"
    assert sum(r["correct"] for r in rows.values()) == sum(t.correct == first for t in experiment.trials) > 0


def test_an_observer_with_wrong_output_shapes_is_named():
    from model_eval.models import ModelError
    from model_eval.observers import Observer, PendingOutputs

    class Short(Observer):
        observer_id = "short:none"

    with pytest.raises(ModelError, match=r"short:none returned probabilities of shape \(1, 16\) for 2 images"):
        PendingOutputs(Short(), ["a", "b"], {"probabilities": np.zeros((1, 16))}).collect()
    with pytest.raises(ModelError, match="short:none gives no features"):
        Short().features(np.zeros((1, 3, 4, 4)))


def test_decision_rules_are_chosen_by_trial_type_from_one_registry():
    from model_eval.decisions import DECISION_RULES, DecisionError, DecisionTable

    assert DECISION_RULES.names() == ["16class-burgert", "16class-mean", "16class-sum", "confusion", "imagenet-top1",
                                      "oddity"]
    table = DecisionTable.choose("16class-sum", {"classify", "oddity"})
    assert {kind: rule.name for kind, rule in table.rules.items()} == {"classify": "16class-sum", "oddity": "oddity",
                                                                       "segment": "confusion"}
    assert DecisionTable.choose(None, {"oddity"}).rules["classify"].name == "16class-mean"
    with pytest.raises(DecisionError, match="rule 'oddity' cannot answer classification trials"):
        DecisionTable.choose("oddity", {"classify"})
    with pytest.raises(DecisionError, match="unknown decision rule '16class-median'; choose one of 16class-burgert"):
        DecisionTable.choose("16class-median", {"classify"})


def test_list_decision_rules_shows_each_summary(capsys):
    assert main(["list", "decision-rules"]) == 0
    out = capsys.readouterr().out
    assert "oddity" in out and "DiST" in out and "Burgert" in out and "16class-mean" in out


def test_list_observer_adapters_and_the_in_tree_observers_with_their_summaries(capsys):
    assert main(["list", "observer-adapters"]) == 0
    listed = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert sorted(listed) == ["segmenter", "timm", "timm-features", "torchvision", "torchvision-segmentation"]
    assert "TorchScript" in listed["segmenter"] and "CHECKPOINT" in listed["timm"]
    assert "oddity trials only" in listed["timm-features"] and "torch hub cache" in listed["torchvision"]
    assert main(["list", "observers"]) == 0
    listed = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert {"clip", "clip-photo"} <= set(listed)
    assert "80 ImageNet prompt templates" in listed["clip"] and "a photo of a {label}." in listed["clip-photo"]


@pytest.fixture
def constant_adapters():
    """Two adapters registered as a package would: one for its own names, one that claims a timm name first."""
    from model_eval.observers import ADAPTERS, Observer

    class Constant(Observer):
        """Every image gets the same probabilities (a toy adapter)."""

        priority = 5

        @classmethod
        def claims(cls, name, weights):
            return name.startswith("constant-")

        @classmethod
        def known_names(cls):
            return ["constant-cat"]

        @classmethod
        def from_spec(cls, name, weights, device):
            observer = cls()
            observer.observer_id, observer.provenance, observer.device = f"{name}:{weights}", {"model": name}, device
            return observer

    class Overriding(Constant):
        """Claims resnet18 before timm does."""

        priority = 20

        @classmethod
        def claims(cls, name, weights):
            return name == "resnet18"

    with ADAPTERS.temporarily("constant", Constant), ADAPTERS.temporarily("overriding", Overriding):
        yield Constant, Overriding


def test_a_registered_adapter_is_asked_in_priority_order(constant_adapters):
    from model_eval.models import UnknownArchitecture
    from model_eval.observers import adapters, check_spec, load_observer

    constant, overriding = constant_adapters
    assert [a.__name__ for a in adapters()] == ["Overriding", "ScriptedSegmenter", "TorchvisionSegmentation",
                                                "TorchvisionObserver", "Constant", "FeatureOnlyObserver", "TimmObserver"]
    observer = load_observer("constant-cat:v2", "cpu")
    assert type(observer) is constant and observer.observer_id == "constant-cat:v2"
    assert type(load_observer("resnet18", "cpu")) is overriding
    with pytest.raises(UnknownArchitecture, match="unknown model architecture 'constant_cat'; did you mean constant-cat"):
        check_spec("constant_cat")


def test_without_a_claiming_adapter_a_spec_gets_close_names_from_every_adapter():
    from model_eval.models import UnknownArchitecture
    from model_eval.observers import check_spec

    with pytest.raises(UnknownArchitecture, match="unknown model architecture 'alexnett'; did you mean alexnet"):
        check_spec("alexnett")
    with pytest.raises(UnknownArchitecture, match="'vit_base_patch16_224' is not a torchvision classification model"):
        check_spec("vit_base_patch16_224:torchvision")
    check_spec("resnet50")  # both have it: timm's, as before


@pytest.fixture
def torch_home(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    return tmp_path / "torch"


def test_torchvision_name_without_cached_weights_says_how_to_fetch_them(torch_home):
    from model_eval.models import WeightsNotFound
    from model_eval.observers import check_spec, load_observer

    check_spec("alexnet")  # model-vs-human's name: torchvision's, not "did you mean haloregnetz_b"
    with pytest.raises(WeightsNotFound) as err:
        load_observer("alexnet", "cpu")
    message = str(err.value)
    assert "alexnet-owt-7be5be79.pth" in message and str(torch_home / "hub" / "checkpoints") in message
    assert "fetch it once with `python -c \"import torchvision; torchvision.models.get_model('alexnet', " \
           "weights='DEFAULT')\"`" in message and "alexnet:PATH/TO/CHECKPOINT.pth" in message


def test_torchvision_model_from_the_hub_cache_and_from_a_checkpoint(torch_home, photos):
    """Probabilities and features equal torchvision's own forward pass, written out layer by layer."""
    import torch

    from model_eval.observers import load_observer
    from model_eval.observers.torchvision_models import import_torchvision

    torchvision = import_torchvision()
    torch.manual_seed(0)
    reference = torchvision.models.mobilenet_v3_small().eval()
    hub = torch_home / "hub" / "checkpoints"
    hub.mkdir(parents=True)
    torch.save(reference.state_dict(), hub / "mobilenet_v3_small-047dcff4.pth")
    checkpoint = torch_home / "mine.pth"
    torch.save({"state_dict": {f"module.{k}": v for k, v in reference.state_dict().items()}}, checkpoint)

    images = torch.from_numpy(np.stack([photos["chelsea"], photos["coffee"]])).permute(0, 3, 1, 2).float() / 255
    with torch.inference_mode():
        pooled = torch.flatten(reference.avgpool(reference.features(images)), 1)
        probs = reference.classifier(pooled).softmax(-1)
        features = pooled  # the classifier block removed, as the DiST authors' evaluation (classifier = Identity)
    for spec, observer_id in (("mobilenet_v3_small", "mobilenet_v3_small:torchvision"),
                              (f"mobilenet_v3_small:{checkpoint}", "mobilenet_v3_small:file-")):
        observer = load_observer(spec, "cpu")
        assert observer.observer_id.startswith(observer_id)
        assert observer.data_config["crop_pct"] == 224 / 256 and observer.data_config["interpolation"] == "bilinear"
        out = observer.outputs(images, frozenset({"probabilities", "features"}))
        assert torch.allclose(out["probabilities"], probs, atol=1e-6)
        assert torch.allclose(out["features"], features, atol=1e-5)
    assert json.dumps(observer.provenance).count("sha256") == 1


def test_probabilities_over_the_observers_own_classes_need_no_imagenet_lists():
    from cuebench.trials import LabelSet
    from model_eval.decisions import DecisionError, decide_classify, own_classes_mapping

    labels = LabelSet("pets", ("cat", "dog"))
    mapping = own_classes_mapping(("dog", "owl", "cat"), labels, "clip:test")
    assert (mapping.indices, mapping.source) == ({"cat": [2], "dog": [0]}, "observer:clip:test")
    probs = np.array([0.2, 0.5, 0.3])  # dog 0.2, owl 0.5, cat 0.3
    assert decide_classify(probs, ("cat", "dog"), mapping, "16class-mean").response == "cat"
    assert decide_classify(probs, ("cat", "dog"), mapping, "16class-burgert").response == NOT_CLEAR  # 0.3 <= 0.5
    assert decide_classify(probs, ("cat", "dog"), mapping, "imagenet-top1").response == "class:1 owl"
    with pytest.raises(DecisionError, match="observer clip:test gives probabilities over 2 classes without label"):
        own_classes_mapping(("dog", "owl"), labels, "clip:test")
