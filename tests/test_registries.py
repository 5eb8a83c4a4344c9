"""Generic tests over the attack and dataset registries (as test_models.py is over the models): a newly registered
attack or dataset gets these without editing a test file."""

import importlib.util
import inspect
from pathlib import Path

import pytest
import torch
from test_models import tiny_args

from capsbench import create_model
from capsbench.attacks import CATALOG, EngineSettings, build, decisions, run_attack
from capsbench.data import DATASETS
from capsbench.errors import CapsbenchError
from capsbench.train.protocols import dataset_protocol

SETTINGS = EngineSettings(num_classes=10, seed=0, batch_size=8)
FEW = {"steps": 3, "queries": 10, "threshold": 1e6}  # a detector that flags nothing: defended attacks run as undefended
MODELS = ("capsnet", "cnn_sabour")  # every capsule hook, and none
FIXED_BUDGET = ("autoattack",)  # published settings only (100 iterations, 5,000 queries): over 10 s a model


def _model(name: str):
    torch.manual_seed(0)
    return create_model(name, **tiny_args(name)).eval()


def _attack(name: str):
    """The attack with few steps or queries, where it takes them."""
    return build(name, {k: v for k, v in FEW.items() if k in CATALOG.get(name).arguments})


@pytest.mark.parametrize("attack", CATALOG.names())
def test_an_attack_is_registered_under_its_own_name_and_states_its_budget(attack):
    instance = _attack(attack)
    assert instance.name == attack and instance.attacks and instance.budget(10)
    assert instance.cost(0.1, 10) > 0  # the work that prices a unit


@pytest.mark.parametrize("attack", CATALOG.names())
def test_an_attacks_settings_are_read_without_torch_and_match_its_constructor(attack):
    """What the catalog reads from the source (settings and their ranges) is what the class takes."""
    entry, instance = CATALOG.get(attack), _attack(attack)
    assert set(entry.ranges) <= set(entry.arguments)
    assert set(entry.arguments) == set(inspect.signature(type(instance)).parameters)
    assert (entry.label, entry.order, entry.white_box, entry.defended) == (
        instance.LABEL, instance.ORDER, instance.WHITE_BOX, instance.DEFENDED)


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("attack", [pytest.param(a, marks=pytest.mark.slow) if a in FIXED_BUDGET else a
                                    for a in CATALOG.names()])
def test_an_attack_stays_in_the_ball_and_breaks_only_what_it_flips(attack, model):
    """Known answers for any attack: nothing broken at eps 0; adversarial images within eps of the originals and in
    [0, 1]; an image counts as broken exactly when the model's decision on its adversarial image is not the label."""
    net, instance = _model(model), _attack(attack)
    images = torch.rand(6, 1, 28, 28)
    labels = decisions(net, images)  # every image "correct clean", as the suite hands them over
    if (reason := instance.applies_to(net, images[:1])) is not None:
        assert len(reason) > 10  # the reason is recorded in the tables instead of a result
        return
    if CATALOG.get(attack).minimal:  # a minimum-norm attack reports each image's distance, not a fixed-eps result
        found = instance.distances(net, images, labels, SETTINGS)
        assert found.shape == (6,) and (found > 0).all()  # every image is correct clean: no zero perturbation flips it
        return
    result = run_attack(net, instance, images, labels, range(6), [0.0, 0.3], SETTINGS)
    assert not result.broken[0.0].any()
    adv = result.adversarial[0.3]
    assert adv.shape == images.shape and adv.min() >= 0 and adv.max() <= 1
    assert (adv - images).abs().max() <= 0.3 + 1e-6
    if not CATALOG.get(attack).defended:  # a defended attack's breaks also need the detector's verdict
        assert torch.equal(result.broken[0.3], decisions(net, adv) != labels)


@pytest.mark.parametrize("attack", CATALOG.names())
def test_an_attack_that_does_not_apply_says_why(attack):
    reason = _attack(attack).applies_to(_model("cnn_sabour"), torch.rand(1, 1, 28, 28))
    assert reason is None or (isinstance(reason, str) and len(reason) > 10)


@pytest.mark.parametrize("name", DATASETS.names())
def test_a_dataset_declares_its_shape_and_a_loader_that_exists(name):
    spec = DATASETS.get(name)
    assert spec.in_channels in (1, 3) and spec.image_size > 0 and spec.num_classes >= 2 and spec.description
    assert 0 < spec.min_val_accuracy < 100
    module = spec.load.target.partition(":")[0]
    assert importlib.util.find_spec(module) is not None
    protocol = dataset_protocol(name, 2)
    assert 0 < protocol.input_size(spec.image_size) <= spec.image_size


@pytest.mark.parametrize("name", DATASETS.names())
def test_a_dataset_offline_without_its_files_names_them_and_where_to_put_them(name, tmp_path: Path):
    with pytest.raises(CapsbenchError) as caught:
        DATASETS.get(name).load(tmp_path, False)
    message = str(caught.value)
    assert str(tmp_path) in message and ("data.root" in message or "CAPSBENCH_DATA" in message)
