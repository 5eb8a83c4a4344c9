"""Every registered model: forward, backward, output contract; paper sizes; constructor errors."""

import pytest
import torch

from capsbench import create_model, list_models
from capsbench.errors import CapsbenchError
from capsbench.layers.capsules import margin_loss
from capsbench.models import MODELS
from capsbench.train.multimnist_protocol import MultiMNISTProtocol

TINY_PARAMETERS = 200_000  # the generic tests build every model at its registry entry's test_args


def tiny_args(name: str) -> dict:
    """The registry entry's test_args: the tiny model the generic tests build (timm keeps test sizes the same way)."""
    return dict(MODELS.get(name).test_args)


@pytest.mark.parametrize("name", list_models())
def test_every_registered_model_is_tiny_at_its_test_args(name):
    """A new model needs only its registry entry (with test_args=...), never an edit here."""
    n = sum(p.numel() for p in create_model(name, **tiny_args(name)).parameters())
    assert n < TINY_PARAMETERS, f"{name} has {n:,} parameters at its test_args: give its register_model entry " \
        "test_args={...} that build a tiny model"


@pytest.mark.parametrize("name", list_models())
def test_forward_backward_and_output_contract(name):
    torch.manual_seed(0)
    model = create_model(name, **tiny_args(name))
    x = torch.rand(3, 1, 28, 28)
    y = torch.tensor([1, 4, 9])
    out = model(x, y)
    assert out.scores.shape == out.logits.shape == (3, 10)
    assert torch.equal(out.scores.argmax(1), out.logits.argmax(1))
    loss = model.loss(out, y, x)
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()
    for pname, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), f"{name}.{pname} got no finite gradient"
        assert p.grad.abs().sum() > 0, f"{name}.{pname} has an all-zero gradient"
    if out.poses is not None:  # class-capsule poses (srcapsnet's class layer has activations only)
        assert out.poses.shape[:2] == (3, 10)
    if model.is_capsule:
        assert ((out.scores >= 0) & (out.scores < 1)).all()


@pytest.mark.parametrize("name", list_models())
def test_multi_label_training_step_with_components(name):
    """The overlap suite's training step: two-digit canvases, multi-hot targets and each digit as a component."""
    torch.manual_seed(0)
    model = create_model(name, **tiny_args(name), image_size=36)
    batch = MultiMNISTProtocol(cache_dir="unused").train_batch(
        torch.rand(4, 1, 28, 28), torch.tensor([1, 2, 3, 4]), torch.Generator().manual_seed(0)
    )
    out = model(batch.inputs, batch.targets)
    loss = model.loss(
        out, batch.targets, batch.inputs, components=batch.components, component_labels=batch.component_labels
    )
    assert loss.dim() == 0 and torch.isfinite(loss)
    loss.backward()
    if getattr(model, "decoder", None) is not None:  # each digit is reconstructed: the loss exceeds the margin loss
        assert loss > margin_loss(out.scores, batch.targets)


@pytest.mark.parametrize("name", list_models())
def test_eval_forward_without_labels(name):
    model = create_model(name, **tiny_args(name)).eval()
    with torch.no_grad():
        out = model(torch.rand(2, 1, 28, 28))
    assert out.scores.shape == (2, 10)


def n_params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def test_paper_sizes():
    # Hand count, CapsNet: conv 81*256+256, primary 256*256*81+256, W 1152*8*160, decoder 160*512+512 +
    # 512*1024+1024 + 1024*784+784 = 8,215,568 (Sabour: 8.2 M).
    assert n_params(create_model("capsnet")) == 8_215_568
    # cnn_sabour: convs 6,656 + 1,638,656 + 819,328; FC 100,352*328+328, 328*192+192, 192*10+10 (Sabour: 35.4 M).
    assert n_params(create_model("cnn_sabour")) == 35_445_522
    # MultiMNIST (36x36 inputs), Sabour section 6: CapsNet 11.36 M; cnn_multimnist 24.56 M = conv 512*81+512 +
    # conv 256*512*25+256 + FC (256*9*9)*1024+1024 after two 2x2 pools + FC 1024*10+10 = 24,563,978.
    assert n_params(create_model("capsnet", image_size=36)) == 11_361_808
    assert n_params(create_model("cnn_multimnist", image_size=36)) == 24_563_978


def test_unknown_model_and_argument_errors():
    with pytest.raises(CapsbenchError, match="did you mean 'capsnet'"):
        create_model("capsnett")
    with pytest.raises(CapsbenchError, match="conv_channels"):
        create_model("capsnet", conv_chanels=3)


def test_registry_descriptions_present():
    for name in MODELS:
        assert MODELS.get(name).description


@pytest.mark.parametrize("name", list_models())
@pytest.mark.parametrize("channels,size,classes", [(3, 32, 10), (1, 32, 5)])  # CIFAR-10/SVHN, smallNORB crops
def test_models_accept_other_dataset_shapes(name, channels, size, classes):
    model = create_model(name, **tiny_args(name), in_channels=channels, image_size=size, num_classes=classes)
    y = torch.arange(2) % classes
    out = model(torch.rand(2, channels, size, size), y)
    assert out.scores.shape == out.logits.shape == (2, classes)
    assert torch.isfinite(model.loss(out, y, torch.rand(2, channels, size, size))).all()


@pytest.mark.parametrize("name", list_models())
def test_attack_logits_give_finite_nonzero_input_gradients(name):
    """Cross-entropy on the logits must reach the pixels: no routing step may mask gradients."""
    torch.manual_seed(0)
    model = create_model(name, **tiny_args(name)).eval()
    x = torch.rand(2, 1, 28, 28, requires_grad=True)
    out = model(x)
    assert torch.isfinite(out.logits).all()
    torch.nn.functional.cross_entropy(out.logits, torch.tensor([1, 2])).backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
