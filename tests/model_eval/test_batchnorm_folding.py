"""Batch norm folded into convolutions (model_eval/batchnorm_folding.py): the folded network answers as the
module it came from, run unchanged by torch, and pairs whose fold would change anything stay apart."""

import numpy as np
import pytest
import torch
from torch import nn

from model_eval.batchnorm_folding import fold_batch_norms
from model_eval.models import load_model
from model_eval.observers import load_observer
from model_eval.torch_compat import import_timm


def randomised_statistics(model: nn.Module, seed: int = 0) -> nn.Module:
    """Running means, variances and affine parameters far from the identity, so a wrong fold shows."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d) and module.track_running_stats:
                n = module.num_features
                module.running_mean.copy_(torch.randn(n, generator=generator) * 0.5)
                module.running_var.copy_(torch.rand(n, generator=generator) * 2 + 0.2)
                if module.affine:
                    module.weight.copy_(torch.randn(n, generator=generator))
                    module.bias.copy_(torch.randn(n, generator=generator))
    return model.eval()


def outputs(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return model(x)


def fold_keeping_outputs(model: nn.Module, x: torch.Tensor, tolerance: float) -> int:
    """Fold ``model``'s batch norms, check that it answers ``x`` as torch ran it unfolded; how many it folded."""
    expected = outputs(model, x)
    folded = fold_batch_norms(model)
    torch.testing.assert_close(outputs(model, x), expected, atol=tolerance, rtol=tolerance)
    return folded


@pytest.mark.slow
def test_lite0_observer_answers_as_timm_module_unchanged(photos):
    """The real offline weights on the real photos: the observer's folded module against timm's own module, as a
    plain script runs it (model_eval.models.load_model folds nothing)."""
    observer = load_observer("tf_efficientnet_lite0", "cpu")
    plain = load_model("tf_efficientnet_lite0").model
    assert observer.provenance["batch_norm"] == "folded into 49 convolutions"
    assert not any(isinstance(m, nn.BatchNorm2d) for m in observer.model.modules())
    assert sum(isinstance(m, nn.BatchNorm2d) for m in plain.modules()) == 49
    pixels = np.stack([photos["chelsea"], photos["coffee"]]).astype(np.float32) / 255
    x = ((torch.from_numpy(pixels).permute(0, 3, 1, 2) - 0.5) / 0.5).contiguous(memory_format=torch.channels_last)
    ours = observer.outputs(x, frozenset({"probabilities", "features"}))
    with torch.inference_mode():
        trunk = plain.forward_features(x)
        expected = plain.forward_head(trunk).softmax(-1)
        features = plain.forward_head(trunk, pre_logits=True)
    torch.testing.assert_close(ours["probabilities"], expected, atol=2e-6, rtol=0)
    torch.testing.assert_close(ours["features"], features, atol=2e-4, rtol=1e-4)
    assert ours["probabilities"].argmax(-1).tolist() == expected.argmax(-1).tolist()


def test_torchvision_batch_norms_fold_and_leave_the_function():
    """torchvision's plain ``BatchNorm2d`` after ``Conv2d`` (no bias), with statistics far from the identity."""
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = randomised_statistics(torchvision.models.resnet18(weights=None))
    # every BatchNorm2d of ResNet-18 follows a convolution of its own
    assert fold_keeping_outputs(model, torch.randn(2, 3, 64, 64), 1e-4) == 20
    assert not any(isinstance(m, nn.BatchNorm2d) for m in model.modules())


class Shapes(nn.Module):
    """Pairs that must stay as they are, beside one that folds."""

    def __init__(self):
        super().__init__()
        timm = import_timm()
        self.standardised = timm.layers.StdConv2d(3, 4, 3, padding=1)  # standardises its weights in forward
        self.norm_standardised = nn.BatchNorm2d(4)
        self.branching = nn.Conv2d(4, 4, 1)  # its output also skips the batch norm
        self.norm_branching = nn.BatchNorm2d(4)
        self.shared = nn.Conv2d(4, 4, 1)  # called twice
        self.norm_shared = nn.BatchNorm2d(4)
        self.plain = nn.Conv2d(4, 4, 3, padding=1, bias=True)
        self.norm_plain = timm.layers.BatchNormAct2d(4, act_layer=nn.ReLU)
        self.tied = nn.Conv2d(4, 4, 3, padding=1, bias=False)
        self.tied.weight = self.plain.weight  # one weight, two batch norms after it
        self.norm_tied = nn.BatchNorm2d(4)
        self.no_stats = nn.Conv2d(4, 4, 1)
        self.norm_no_stats = nn.BatchNorm2d(4, track_running_stats=False)  # normalises by the batch's statistics

    def forward(self, x):
        x = self.norm_standardised(self.standardised(x))
        y = self.branching(x)
        x = self.norm_branching(y) + y
        x = self.norm_shared(self.shared(self.shared(x)))
        x = self.norm_plain(self.plain(x))
        x = self.norm_tied(self.tied(x))
        return self.norm_no_stats(self.no_stats(x))


def test_only_pairs_whose_fold_changes_nothing_fold():
    torch.manual_seed(1)
    model = randomised_statistics(Shapes())
    assert fold_keeping_outputs(model, torch.randn(3, 3, 8, 8), 1e-5) == 2
    assert isinstance(model.norm_plain, nn.ReLU) and isinstance(model.norm_tied, nn.Identity)
    kept = [model.norm_standardised, model.norm_branching, model.norm_shared, model.norm_no_stats]
    assert all(isinstance(m, nn.BatchNorm2d) for m in kept)


class DataDependent(nn.Module):
    """A forward fx cannot trace (its path depends on the values)."""

    def __init__(self):
        super().__init__()
        self.conv, self.norm = nn.Conv2d(3, 3, 1), nn.BatchNorm2d(3)

    def forward(self, x):
        x = self.norm(self.conv(x))
        return x if x.sum() > 0 else -x


def test_untraceable_modules_and_training_mode_are_left_alone():
    torch.manual_seed(2)
    assert fold_keeping_outputs(randomised_statistics(DataDependent()), torch.randn(2, 3, 4, 4), 0) == 0
    with pytest.raises(ValueError, match="eval mode"):
        fold_batch_norms(Shapes().train())
