"""CIFAR ResNets (He et al. 2016) and srcapsnet on their trunk (Hahn et al. 2019): sizes, shortcuts, errors."""

import pytest
import torch
from torch.nn import functional as F

from capsbench import create_model
from capsbench.errors import CapsbenchError
from capsbench.models import MODELS
from capsbench.models.resnet import BasicBlock, ResNetTrunk, resnet_blocks
from capsbench.reporting.baselines import load_baselines, matching


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def resnet_count(n: int, in_channels: int = 3, classes: int = 10) -> int:
    """Hand count of a 6n+2 CIFAR ResNet: bias-free convs, BN (2 per channel), option-A shortcuts (0), FC."""
    convs = 9 * in_channels * 16 + 2 * n * 9 * 16 * 16 + (9 * 16 * 32 + (2 * n - 1) * 9 * 32 * 32) \
        + (9 * 32 * 64 + (2 * n - 1) * 9 * 64 * 64)
    bn = 2 * (16 + 2 * n * (16 + 32 + 64))
    return convs + bn + 64 * classes + classes


@pytest.mark.parametrize(
    "name,n,published", [("resnet20", 3, 0.27e6), ("resnet56", 9, 0.85e6), ("resnet110", 18, 1.7e6)]
)
def test_parameter_counts_match_he_et_al_table_6(name, n, published):
    model = create_model(name, in_channels=3, image_size=32)
    assert n_params(model) == resnet_count(n)  # 269,722 / 853,018 / 1,727,962
    assert float(f"{n_params(model):.2g}") == published  # Table 6 gives two significant digits
    layers = sum(isinstance(m, (torch.nn.Conv2d, torch.nn.Linear)) for m in model.modules())
    assert layers == 6 * n + 2


def test_option_a_shortcut_subsamples_and_appends_zero_channels():
    block = BasicBlock(in_ch=2, out_ch=4, stride=2)
    x = torch.arange(2 * 5 * 5, dtype=torch.float32).view(1, 2, 5, 5)
    short = block.shortcut(x)
    assert short.shape == (1, 4, 3, 3)
    assert torch.equal(short[:, :2], x[:, :, ::2, ::2]) and not short[:, 2:].any()
    for conv in (block.conv1, block.conv2):  # residual branch 0 (BN of zeros, default bias 0): out = relu(shortcut)
        torch.nn.init.zeros_(conv.weight)
    block.eval()
    assert torch.equal(block(x - 20), F.relu(block.shortcut(x - 20)))


def test_trunk_output_shape_and_input_normalisation():
    trunk = ResNetTrunk(in_channels=3, blocks=1, mean=(0.4, 0.5, 0.6), std=0.25).eval()
    assert trunk(torch.rand(2, 3, 32, 32)).shape == (2, 64, 8, 8) and ResNetTrunk.output_size(32) == 8
    assert ResNetTrunk.output_size(28) == 7 and trunk(torch.rand(1, 3, 28, 28)).shape == (1, 64, 7, 7)
    assert (
        torch.allclose(trunk.mean.flatten(), torch.tensor([0.4, 0.5, 0.6]))
        and trunk.std.flatten().tolist() == [0.25] * 3
    )
    with pytest.raises(ValueError, match="mean needs 1 or 3 values"):
        ResNetTrunk(in_channels=3, blocks=1, mean=(0.1, 0.2))


def test_resnet_names_parse_to_blocks_per_stage():
    assert [resnet_blocks(f"resnet{d}") for d in (8, 20, 56, 110)] == [1, 3, 9, 18]
    for bad in ("resnet21", "resnet2", "resnet", "vgg16"):
        with pytest.raises(CapsbenchError, match="6n \\+ 2"):
            resnet_blocks(bad)


def test_srcapsnet_defaults_unchanged_and_resnet20_backbone_sizes():
    # the default (small backbone) model that the smoke and quick budgets narrow: unchanged by the backbone option
    assert n_params(create_model("srcapsnet")) == 3_454_752
    # on ResNet-20's trunk for 32x32 RGB (Hahn et al.'s CIFAR-10/SVHN models): trunk 269,072 (ResNet-20 less its FC)
    # + primary capsules (conv 64->32 and 64->512 at 3x3 with biases, BN) + layers. SR-1: class layer over the 8x8 grid
    # (2,048 children x 10 x 16 routing weights + biases); the authors' poster gives 0.9 M (SR-1) and 3.2 M (SR-2).
    sr1 = create_model("srcapsnet", backbone="resnet20", caps_layers=0, in_channels=3, image_size=32)
    sr2 = create_model("srcapsnet", backbone="resnet20", caps_layers=1, in_channels=3, image_size=32)
    trunk = resnet_count(3) - 650
    primary = (64 * 32 * 9 + 32 + 64) + (64 * 512 * 9 + 512 + 1024)
    assert n_params(sr1) == trunk + primary + 2048 * 10 * 16 + 2048 * 10 == 932_208
    assert n_params(sr2) == 3_188_080
    assert (round(n_params(sr1) / 1e6, 1), round(n_params(sr2) / 1e6, 1)) == (0.9, 3.2)
    out = sr2(torch.rand(2, 3, 32, 32))
    assert torch.allclose(out.scores.sum(dim=1), torch.ones(2), atol=1e-5)
    with pytest.raises(CapsbenchError, match="not a CIFAR ResNet"):
        create_model("srcapsnet", backbone="resnet21")


def logged_args(name: str, **overrides) -> dict[str, str]:
    """A model's constructor arguments as the MLflow params spell them (what report matching sees)."""
    args = {**MODELS.get(name).arguments(), **overrides}
    return {k: str(list(v) if isinstance(v, tuple) else v) for k, v in args.items()}


def test_published_numbers_sit_beside_the_models_they_describe():
    entries = load_baselines()
    rows = matching(
        entries,
        suite="accuracy",
        model_args={
            "resnet20": logged_args("resnet20"),
            "resnet110": logged_args("resnet110"),
            "srcapsnet": logged_args("srcapsnet", backbone="resnet20", caps_layers=1),
        },
    )
    cells = {(r["model"], r["dataset"]): (r["value"], r["std"]) for r in rows}
    assert cells[("resnet20", "cifar10")] == (8.75, None) and cells[("resnet110", "cifar10")] == (
        6.61,
        0.16,
    )  # He et al.
    assert cells[("resnet20", "svhn")] == (3.55, 0.11)  # Hahn et al.'s AvgPool baseline
    assert cells[("srcapsnet", "cifar10")] == (7.86, 0.12) and cells[("srcapsnet", "svhn")] == (3.12, 0.13)  # SR-2
    small = matching(entries, suite="accuracy", model_args={"srcapsnet": logged_args("srcapsnet")})
    assert not [r for r in small if r["dataset"] in ("cifar10", "svhn")]  # never beside the small-backbone model
