"""SagNet, InfoDrop and DiSTinguish on the training harness: they learn, and act where their papers say."""

from __future__ import annotations

import pytest
import torch

from model_eval.training.algorithms import (ALGORITHMS, InfoDrop, SagNet, content_randomize, distinguish_labels,
                                            drop_log_probabilities, info_dropout, stage_module, style_randomize)
from model_eval.training.jobs import build_model


def toy_batch(size: int = 32):
    torch.manual_seed(0)
    return torch.randn(8, 3, size, size), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sagnet", "infodrop", "distinguish"])
def test_loss_decreases_on_a_toy_batch(name):
    x, y = toy_batch(16)
    torch.manual_seed(1)
    algorithm = ALGORITHMS[name](build_model("test_resnet"), lr=1e-2, seed=0)
    losses = [algorithm.update(x, y) for _ in range(10)]
    assert losses[-1] < 0.7 * losses[0]
    assert algorithm.predict(x).shape == (8,)


def test_style_randomisation_mixes_channel_statistics_and_keeps_content():
    torch.manual_seed(0)
    x = torch.randn(4, 3, 8, 8) * torch.tensor([1.0, 2.0, 3.0]).view(1, 3, 1, 1) + 5
    perm, alpha = torch.tensor([2, 0, 3, 1]), torch.tensor([0.0, 0.25, 0.5, 1.0]).view(4, 1, 1, 1)
    mean, std = x.mean(dim=(2, 3)), x.std(dim=(2, 3), unbiased=False)
    a = alpha.view(4, 1)
    y = style_randomize(x, perm, alpha)
    torch.testing.assert_close(y.mean(dim=(2, 3)), a * mean + (1 - a) * mean[perm], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(y.std(dim=(2, 3), unbiased=False), a * std + (1 - a) * std[perm], atol=1e-3, rtol=1e-3)
    normalised = (x - x.mean(dim=(2, 3), keepdim=True)) / x.std(dim=(2, 3), keepdim=True)
    torch.testing.assert_close((y - y.mean(dim=(2, 3), keepdim=True)) / y.std(dim=(2, 3), keepdim=True), normalised,
                               atol=1e-3, rtol=1e-3)
    z = content_randomize(x, perm)  # own style, another sample's content
    torch.testing.assert_close(z.mean(dim=(2, 3)), mean, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close((z - z.mean(dim=(2, 3), keepdim=True)) / z.std(dim=(2, 3), keepdim=True),
                               normalised[perm], atol=1e-3, rtol=1e-3)


def test_sagnet_randomises_at_the_stride_8_stage_only_while_training():
    model = build_model("resnet18")
    assert stage_module(model, 8) == "layer2"  # BiasBed's style_stage 3 on ResNet: after layer2
    assert stage_module(build_model("tf_efficientnet_lite0"), 8) == "blocks.2"
    sagnet = SagNet(build_model("test_resnet"), seed=0)
    assert sagnet.split == "layer2"
    seen = []
    sagnet.model.get_submodule("layer3").register_forward_pre_hook(lambda m, inp: seen.append(inp[0].detach()))
    x, y = toy_batch()
    sagnet.update(x, y)
    sagnet.predict(x)
    assert sagnet.randomised == 1
    sagnet.model.eval()
    with torch.no_grad():
        plain = sagnet.model.layer2(sagnet.model.layer1(sagnet.model.maxpool(sagnet.model.act1(
            sagnet.model.bn1(sagnet.model.conv1(x))))))
    torch.testing.assert_close(seen[1], plain)  # predict: the plain features
    assert sagnet.adv_params and all(p.grad is not None for p in sagnet.adv_params)
    assert sagnet.model.layer3[0].conv1.weight.grad is not None


def test_infodrop_drops_homogeneous_regions_more_than_edges():
    x = torch.zeros(1, 3, 32, 32)
    g = torch.Generator().manual_seed(0)
    x[:, :, :, 16:] = torch.rand(1, 3, 32, 16, generator=g)  # flat left half, busy right half
    p = drop_log_probabilities(x, (16, 16), kernel=3, generator=torch.Generator().manual_seed(1)).exp()
    torch.testing.assert_close(p.sum(), torch.tensor(1.0))
    assert p[..., :7].sum() > 0.9 and p[..., 9:].sum() < 0.05
    features = torch.ones(1, 4, 16, 16)
    dropped = info_dropout(features, p.log(), drop_rate=1.5, generator=torch.Generator().manual_seed(2))
    assert (dropped[..., :7] == 0).float().mean() > 0.5
    assert (dropped[..., 9:] == 0).float().mean() < 0.05


def test_infodrop_acts_after_the_stem_only_while_training():
    infodrop = InfoDrop(build_model("test_resnet"), seed=0)
    assert infodrop.stage == "act1" and infodrop.kernel == 3  # the stem's first convolution
    zeros = []
    infodrop.model.get_submodule("maxpool").register_forward_pre_hook(
        lambda m, inp: zeros.append(float((inp[0] == 0).float().mean())))
    x, y = toy_batch()
    infodrop.predict(x)
    infodrop.update(x, y)
    assert infodrop.dropped == 1
    assert zeros[1] > zeros[0] + 0.02


def test_distinguish_labels_are_2n_way_with_disrupted_images_on_the_upper_n():
    labels = torch.tensor([0, 1, 2, 0, 1, 2])
    disrupted = torch.tensor([False, False, False, True, True, True])
    assert distinguish_labels(labels, disrupted, 3).tolist() == [0, 1, 2, 3, 4, 5]
    assert ALGORITHMS["distinguish"].output_classes(3) == 6 and ALGORITHMS["erm"].output_classes(3) == 3
    with pytest.raises(ValueError, match="0..2"):
        distinguish_labels(torch.tensor([3]), torch.tensor([True]), 3)
