"""SagNet, InfoDrop and DiSTinguish on the training harness: they learn, and act where their papers say."""

from __future__ import annotations

import re

import pytest
import torch

from model_eval.training.algorithms import ALGORITHMS
from model_eval.training.algorithms.distinguish import distinguish_labels
from model_eval.training.algorithms.infodrop import InfoDrop, drop_log_probabilities, info_dropout, stride4_stage
from model_eval.training.algorithms.sagnet import SagNet, content_randomize, stage_module, style_randomize
from model_eval.training.jobs import build_model


def toy_batch(size: int = 32):
    torch.manual_seed(0)
    return torch.randn(8, 3, size, size), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sagnet", "infodrop", "distinguish"])
def test_loss_decreases_on_a_toy_batch(name):
    x, y = toy_batch(16)
    torch.manual_seed(1)
    # Adam for every method: ten steps show that the harness learns; SagNet's own SGD step is checked by hand
    # (test_sagnet_defaults_to_sgd_and_reproduces_the_official_adversarial_step)
    algorithm = ALGORITHMS[name](build_model("test_resnet"), lr=1e-2, seed=0, optimizer="adam")
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


def test_content_randomisation_sends_no_gradient_to_the_sample_whose_content_is_borrowed():
    x = torch.arange(4 * 2 * 3 * 3, dtype=torch.float32).view(4, 2, 3, 3).sin().requires_grad_()
    perm = torch.tensor([1, 2, 3, 0])
    content_randomize(x, perm)[0].pow(2).sum().backward()  # a loss on sample 0 only, content from sample 1
    assert x.grad[0].abs().sum() > 0  # through sample 0's own mean and std
    assert x.grad[1:].abs().sum() == 0  # nothing through the borrowed content (official code: .detach())


def test_sagnet_steps_the_clipped_adversarial_gradient_with_its_own_optimiser():
    sagnet = SagNet(build_model("test_resnet"), seed=0, optimizer="sgd", lr=1.0, w_adv=10.0, clip_adv=1e-3)
    encoder_norms = {id(p) for name, m in sagnet.model.named_modules()
                     if name.split(".")[0] in ("conv1", "bn1", "layer1", "layer2") and isinstance(m, torch.nn.BatchNorm2d)
                     for p in m.parameters()}
    assert {id(p) for p in sagnet.adv_params} == encoder_norms
    groups = [{id(p) for g in o.param_groups for p in g["params"]}
              for o in (sagnet.optimizer, sagnet.adv_optimizer, sagnet.style_optimizer)]
    assert groups[1] == encoder_norms and not groups[2] & groups[0]
    stepped = []
    original_step = sagnet.adv_optimizer.step

    def record(*args, **kwargs):
        stepped.append(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in sagnet.adv_params])))
        return original_step(*args, **kwargs)

    sagnet.adv_optimizer.step = record
    sagnet.update(*toy_batch())
    assert len(stepped) == 1 and abs(float(stepped[0]) - 1e-3) < 1e-6  # clipped on its own, not with the content loss


class NormThenHead(torch.nn.Module):
    """A hand-checkable network: the encoder is one BatchNorm (the split, at "stride 8"), the branch after
    it a global average pool and a linear head."""

    def __init__(self, channels: int = 2, classes: int = 3):
        super().__init__()
        self.bn = torch.nn.BatchNorm2d(channels)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(channels, classes)
        self.feature_info = [{"module": "bn", "reduction": 8}]

    def forward(self, x):
        return self.fc(self.pool(self.bn(x)).flatten(1))


@pytest.mark.validates(
    "SagNet adversarial step on the encoder's normalisation parameters",
    definition="theta <- theta - lr (clip(grad of w_adv * -1/K sum_k log(p_k + 1e-5), 0.1) + wd theta); SGD, lr 0.004, "
               "momentum 0.9 (first step: the buffer is the gradient), weight decay 1e-4, w_adv 0.1, clip_adv 0.1",
    source="Nam et al. 2021, Eq. 6; official train.py and AdvLoss (hyeonseobnam/sagnet)",
    reference="hand computation in numpy: batch-norm statistics, the style head's logits on the sample's own "
              "feature mean, the loss gradient and torch's clip_grad_norm_ rule, written without the project's code",
    tolerance="abs 1e-7 per parameter (steps of about 4e-4)")
def test_sagnet_defaults_to_sgd_and_reproduces_the_official_adversarial_step():
    import numpy as np

    torch.manual_seed(3)
    model = NormThenHead()
    with torch.no_grad():
        model.bn.weight.copy_(torch.tensor([1.5, 0.8]))
        model.bn.bias.copy_(torch.tensor([0.2, -0.3]))
        model.fc.weight.zero_()  # the content loss then sends no gradient to the encoder: only weight decay acts
    sagnet = SagNet(model, seed=0)
    s = sagnet.settings
    assert (s.name, s.lr, s.momentum, s.weight_decay) == ("sgd", 0.004, 0.9, 1e-4)
    assert isinstance(sagnet.adv_optimizer, torch.optim.SGD) and sagnet.w_adv == 0.1 and sagnet.clip_adv == 0.1
    W = 4 * np.array([[2.0, -1.0], [0.5, 1.5], [-1.0, 0.3]])
    b = np.array([0.1, -0.2, 0.05])
    with torch.no_grad():
        sagnet.style_net.fc.weight.copy_(torch.from_numpy(W).float())
        sagnet.style_net.fc.bias.copy_(torch.from_numpy(b).float())
    g = torch.Generator().manual_seed(5)
    x = torch.randn(4, 2, 4, 4, generator=g) * torch.tensor([1.0, 3.0]).view(1, 2, 1, 1) + 0.5
    y = torch.tensor([0, 1, 2, 0])
    gamma0, beta0 = np.array([1.5, 0.8]), np.array([0.2, -0.3])
    sagnet.update(x, y)

    # by hand: training-mode batch norm, then each sample's spatial mean of the normalised features m_ic;
    # the style head sees the sample's own mean and std on borrowed content whose spatial mean is 0, so its
    # pooled input is gamma_c m_ic + beta_c and its logits z_i = W (gamma * m_i + beta) + b
    xs = x.double().numpy()
    xhat = (xs - xs.mean(axis=(0, 2, 3), keepdims=True)) / np.sqrt(xs.var(axis=(0, 2, 3), keepdims=True) + 1e-5)
    m = xhat.mean(axis=(2, 3))
    z = (gamma0 * m + beta0) @ W.T + b
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    n, k = p.shape
    # L = w_adv / n sum_i -1/K sum_k log(p_ik + eps);  dL/dz_ij = -w_adv/(nK) sum_k p_ik (delta_kj - p_ij) / (p_ik + eps)
    dz = np.stack([-0.1 / (n * k) * sum(p[i, q] * ((q == j) - p[i, j]) / (p[i, q] + 1e-5) for q in range(k))
                   for i in range(n) for j in range(k)]).reshape(n, k)
    d_pooled = dz @ W
    grad = np.concatenate([(d_pooled * m).sum(axis=0), d_pooled.sum(axis=0)])  # d/dgamma, d/dbeta
    clipped = grad * min(1.0, 0.1 / (np.linalg.norm(grad) + 1e-6))
    theta0 = np.concatenate([gamma0, beta0])
    lr, wd = 0.004, 1e-4
    expected = theta0 - lr * (clipped + wd * theta0) - lr * wd * theta0  # adversarial step + content step's decay
    got = np.concatenate([model.bn.weight.detach().double().numpy(), model.bn.bias.detach().double().numpy()])
    assert np.linalg.norm(grad) > 0.1  # the clip is what sets the step here
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-7)
    assert 3.9e-4 < np.linalg.norm(got - theta0) < 4.1e-4  # lr x clip_adv, as in the official code


def test_sagnet_takes_adam_only_when_asked_for_and_records_it():
    from model_eval.training.algorithms import OptimizerRequest

    adam = SagNet(build_model("test_resnet"), seed=0, optimizer="adam", lr=1e-4)
    assert isinstance(adam.adv_optimizer, torch.optim.Adam) and adam.settings.as_dict() == {
        "name": "adam", "lr": 1e-4, "weight_decay": 0.0, "momentum": 0.0}
    assert OptimizerRequest().settle(ALGORITHMS["erm"], adam_lr=1e-4).name == "adam"
    assert OptimizerRequest().settle(ALGORITHMS["sagnet"], adam_lr=1e-4).lr == 0.004  # Adam's lr is not SGD's
    assert OptimizerRequest("sgd", lr=1e-4).settle(ALGORITHMS["erm"]).as_dict() == {
        "name": "sgd", "lr": 1e-4, "weight_decay": 1e-4, "momentum": 0.9}  # BiasBed's protocol


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


def test_infodrop_sits_at_the_stride_4_stage():
    assert stride4_stage(build_model("resnet18")) == "maxpool"  # BiasBed / Shi et al.: after the max-pool
    assert stride4_stage(build_model("tf_efficientnet_lite0")) == "blocks.1"
    with pytest.raises(ValueError, match="stride 4"):
        stride4_stage(build_model("vit_tiny_patch16_224"))


def test_infodrop_drops_more_in_the_flat_half_of_a_hand_built_image():
    infodrop = InfoDrop(build_model("test_resnet"), seed=0)
    assert infodrop.stage == "maxpool" and infodrop.kernel == 3  # the stem's first convolution
    x = torch.zeros(1, 3, 64, 64)
    x[..., 32:] = torch.rand(1, 3, 64, 32, generator=torch.Generator().manual_seed(0))  # flat | noisy
    grids = []
    infodrop.model.layer1.register_forward_pre_hook(lambda m, inp: grids.append(inp[0].shape[-2:]))
    infodrop.predict(x)
    assert tuple(grids[0]) == (16, 16)  # 64 / 4
    infodrop._input = x
    dropped = infodrop._hook(None, None, torch.ones(1, 8, 16, 16)) == 0
    infodrop._input = None
    assert dropped[..., :7].float().mean() > 0.5 > 0.05 > dropped[..., 9:].float().mean()


@pytest.mark.parametrize("protocol, drops_at_test", [("shi", False), ("biasbed", True)])
def test_infodrop_test_time_protocols(protocol, drops_at_test):
    infodrop = InfoDrop(build_model("test_resnet"), seed=0, test_protocol=protocol)
    x, y = toy_batch()
    infodrop.start_epoch(1, 6)
    infodrop.update(x, y)
    infodrop.predict(x)
    assert infodrop.dropped == 1 + drops_at_test
    with pytest.raises(ValueError, match="test_protocol: must be one of 'shi' or 'biasbed', got 'both'"):
        InfoDrop(build_model("test_resnet"), test_protocol="both")


def test_infodrop_shi_fine_tunes_without_infodrop_at_the_end_and_selects_only_there():
    """Shi et al.'s code: 100 epochs with InfoDrop, then 20 without (20/120 = 1/6 of the run)."""
    shi = InfoDrop(build_model("test_resnet"), seed=0)
    # by hand: 12 epochs x 1/6 = 2 plain epochs (11, 12); 6 x 1/6 = 1 (6); 3 x 1/6 = 0.5 -> at least one; 1: none
    assert [shi.finetune_epochs(e) for e in (12, 6, 3, 1)] == [2, 1, 1, 0]
    assert [e for e in range(1, 13) if shi.selectable(e, 12)] == [11, 12]
    x, y = toy_batch()
    for epoch in range(1, 13):
        shi.start_epoch(epoch, 12)
        if epoch in (1, 10, 11, 12):
            shi.update(x, y)
    assert shi.dropped == 2  # epochs 1 and 10 drop; 11 and 12 train the plain network
    biasbed = InfoDrop(build_model("test_resnet"), seed=0, test_protocol="biasbed")
    assert biasbed.finetune_epochs(12) == 0 and all(biasbed.selectable(e, 12) for e in range(1, 13))
    none = InfoDrop(build_model("test_resnet"), seed=0, finetune_fraction=0.0)
    assert none.finetune_epochs(12) == 0


def test_each_algorithm_has_typed_options_with_the_papers_defaults():
    from model_eval.training.algorithms import AlgorithmError, parse_algorithm_options

    names = ["erm", "padain", "sagnet", "infodrop", "distinguish"]
    options = parse_algorithm_options([], names)
    assert options["padain"].p == 0.01  # Nuriel et al. 2021
    assert (options["sagnet"].w_adv, options["sagnet"].clip_adv, options["sagnet"].split_reduction) == (0.1, 0.1, 8)
    info = options["infodrop"]  # BiasBed's InfoDrop settings
    assert (info.drop_rate, info.temperature, info.radius, info.band_width, info.samples) == (1.5, 0.03, 3, 1.0, 9)
    assert options["erm"].model_dump() == {} == options["distinguish"].model_dump()
    chosen = parse_algorithm_options(["padain.p=0.25", "w_adv=0.5", "clip_adv=none", "test_protocol=biasbed"], names)
    assert chosen["padain"].p == 0.25 and chosen["sagnet"].w_adv == 0.5 and chosen["sagnet"].clip_adv is None
    assert chosen["padain"].changed() == {"p": 0.25} and options["padain"].changed() == {}
    sagnet = SagNet(build_model("test_resnet"), seed=0, **chosen["sagnet"].model_dump())
    assert (sagnet.w_adv, sagnet.clip_adv) == (0.5, None)
    for pairs, message in ((["padain.p=1.5"], "padain option p: must be <= 1.0"),
                           (["p=x"], "padain option p: expected a number"),
                           (["padain.q=1"], "q: is not an option of padain (its options: p)"),
                           (["erm.p=1"], "erm option p: is not an option of erm"),
                           (["mixstyle.p=1"], "'mixstyle' is not among the algorithms trained here"),
                           (["p"], "must be NAME.KEY=VALUE")):
        with pytest.raises(AlgorithmError, match=re.escape(message)):
            parse_algorithm_options(pairs, names)
    with pytest.raises(AlgorithmError, match=re.escape("padain option p: must be <= 1.0")):
        ALGORITHMS["padain"](build_model("test_resnet"), p=2.0)


def test_distinguish_labels_are_2n_way_with_disrupted_images_on_the_upper_n():
    labels = torch.tensor([0, 1, 2, 0, 1, 2])
    disrupted = torch.tensor([False, False, False, True, True, True])
    assert distinguish_labels(labels, disrupted, 3).tolist() == [0, 1, 2, 3, 4, 5]
    assert ALGORITHMS["distinguish"].output_classes(3) == 6 and ALGORITHMS["erm"].output_classes(3) == 3
    with pytest.raises(ValueError, match="0..2"):
        distinguish_labels(torch.tensor([3]), torch.tensor([True]), 3)


def test_distinguish_answers_with_each_class_plus_its_disrupted_twin():
    logits = torch.tensor([[1.0, 2.0, 0.5, 3.0, -4.0, 0.0]])  # n = 3: originals 1, 2, 0.5; twins 3, -4, 0
    torch.testing.assert_close(ALGORITHMS["distinguish"].answer_logits(logits, 3), torch.tensor([[4.0, -2.0, 0.5]]))
    assert ALGORITHMS["distinguish"].answer_logits(logits, 3).argmax().item() == 0  # the first n alone: class 1
    torch.testing.assert_close(ALGORITHMS["erm"].answer_logits(logits[:, :3], 3), logits[:, :3])


def test_algorithms_live_in_the_one_registry():
    from cuebench.registry import ALL, UnknownName

    assert ALL["algorithms"] is ALGORITHMS
    assert ALGORITHMS.names() == ["distinguish", "erm", "infodrop", "padain", "sagnet"]
    assert ALGORITHMS.summary("sagnet").startswith("SagNet (Nam et al. 2021)")
    with pytest.raises(UnknownName, match="did you mean sagnet"):
        ALGORITHMS["sagnett"]
    with pytest.raises(ValueError, match="one of adam, sgd"):
        ALGORITHMS["erm"](build_model("test_resnet"), optimizer="lbfgs")
