"""External models: registration by alias, YAML and factory, the adapter's reading of every output form and
its hooks, strict weights loading, and unit keys that follow the weights."""

import shutil

import pytest
import torch
from composing import compose
from safetensors.torch import save_file

from capsbench.attacks import build
from capsbench.errors import CapsbenchError
from capsbench.layers.capsules import capsule_logits, squash
from capsbench.layers.straight_through import saturating
from capsbench.models import MODELS, create_model
from capsbench.models.adapter import ExternalModel, reaches_straight_through
from capsbench.models.base import NotApplicable
from capsbench.models.external import register_alias
from capsbench.models.weights import load_weights, state_sha256
from capsbench.run.plan import plan

SMOKE = ["suite=accuracy", "budget=smoke", "device=cpu", "tracking.enabled=false"]


def _compose(tmp_path, *extra):
    return compose([*SMOKE, f"output_dir={tmp_path}", *extra])


def _built(target, **args):
    register_alias("t_model", target, "test")
    return create_model("t_model", **{"in_channels": 1, "image_size": 28, "num_classes": 10, **args})


def test_an_alias_on_the_command_line_works_like_a_built_in_name(tmp_path):
    cfg = _compose(tmp_path, "register.ext=byo_models.plain:PlainNet", "models=[ext,capsnet]",
                   "model_args.ext.width=3", "model_train.ext.lr=0.01")
    units = plan(cfg)
    assert [u.model for u in units] == ["ext", "capsnet"]
    assert units[0].config["model_args"]["ext"] == {"width": 3}
    assert units[0].config["train"]["lr"] == 0.01
    assert units[0].config["external"]["target"] == "byo_models.plain:PlainNet" and "external" not in units[1].config
    assert MODELS.get("ext").arguments() == {"in_channels": 1, "image_size": 28, "num_classes": 10, "width": 4}


def test_an_alias_in_a_yaml_config_file(tmp_path):
    (tmp_path / "run.yaml").write_text("register:\n  ycaps: byo_models.caps:Caps\nmodels: [ycaps]\n")
    cfg = _compose(tmp_path, f"config={tmp_path / 'run.yaml'}")
    assert list(cfg.models) == ["ycaps"] and MODELS.get("ycaps").target == "byo_models.caps:Caps"
    (tmp_path / "bad.yaml").write_text("regsiter: {x: byo_models.caps:Caps}\n")
    with pytest.raises(CapsbenchError, match=r"unknown config key 'regsiter.x' in config file .*: did you mean 'regis"):
        _compose(tmp_path, f"config={tmp_path / 'bad.yaml'}")


def test_a_factory_function_and_its_arguments(tmp_path):
    cfg = _compose(tmp_path, "register.fac=byo_models.plain:make_plain", "models=[fac]", "model_args.fac.width=2")
    model = create_model("fac", **{"in_channels": 1, "image_size": 28, "num_classes": 10, "width": 2})
    assert isinstance(model, ExternalModel) and model.module.conv.out_channels == 2 and cfg.models == ["fac"]
    with pytest.raises(CapsbenchError, match=r"model 'fac' has no argument 'widht': did you mean 'width'"):
        _compose(tmp_path, "register.fac=byo_models.plain:make_plain", "models=[fac]", "model_args.fac.widht=2")


def test_a_required_argument_must_be_given(tmp_path):
    with pytest.raises(CapsbenchError, match=r"needs depth: give model_args\.deep\.depth="):
        _compose(tmp_path, "register.deep=byo_models.plain:NeedsDepth", "models=[deep]")
    assert _compose(tmp_path, "register.deep=byo_models.plain:NeedsDepth", "models=[deep]", "model_args.deep.depth=2")


def test_plain_logits_are_adapted_with_softmax_scores():
    model = _built("byo_models.plain:PlainNet").eval()
    x = torch.rand(3, 1, 28, 28)
    out = model(x)
    assert torch.equal(out.logits, model.module(x)) and torch.allclose(out.scores, out.logits.softmax(1))
    assert not model.is_capsule and out.pre_squash is None
    assert "not a capsule model" in build("pgd_adaptive").applies_to(model, x[:1])
    assert "not a capsule model" in build("vote").applies_to(model, x[:1])


@pytest.mark.parametrize("target", ["byo_models.caps:Caps", "byo_models.caps:CapsLengths",
                                    "byo_models.caps:CapsTuple", "byo_models.caps:CapsRenamed"])
def test_capsule_outputs_give_lengths_as_scores_and_log_normalised_logits(target):
    torch.manual_seed(0)
    model = _built(target).eval()
    x = torch.rand(2, 1, 28, 28)
    lengths = squash(model.module.pre(x)).norm(dim=-1)
    out = model(x)
    assert model.is_capsule and torch.allclose(out.scores, lengths)
    assert torch.allclose(out.logits, capsule_logits(lengths))


def test_an_undeclared_tuple_and_an_unreadable_output_are_one_line_errors():
    with pytest.raises(CapsbenchError, match=r"returns a tuple of 2: name its entries .*capsbench_outputs = \("):
        _built("byo_models.caps:CapsTupleUndeclared")(torch.rand(1, 1, 28, 28))
    with pytest.raises(CapsbenchError, match=r"returned a str: expected a ModelOutput, a \(B, C\) tensor"):
        _built("byo_models.broken:ReturnsText")(torch.rand(1, 1, 28, 28))


def test_hooks_run_the_adaptive_attacks_and_missing_hooks_say_which_and_why():
    x = torch.rand(1, 1, 28, 28)
    hooked, bare = _built("byo_models.caps:Caps").eval(), _built("byo_models.caps:CapsLengths").eval()
    assert build("pgd_adaptive").applies_to(hooked, x) is None
    assert build("vote").applies_to(hooked, x) is None
    assert hooked.vote_logits(x).shape == (1, 10)
    reason = build("pgd_adaptive").applies_to(bare, x)
    assert "no pre_squash class capsules" in reason and "straight-through" in reason and "not adaptive" in reason
    assert "exposes no vote_logits(x) hook" in build("vote").applies_to(bare, x)
    with pytest.raises(NotApplicable):
        bare.vote_logits(x)


def test_a_squash_through_the_straight_through_switch_is_a_hook():
    class SwitchedCaps(torch.nn.Module):
        capsbench_outputs = "lengths"

        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(784, 40)

        def forward(self, x):
            return saturating(squash, self.linear(x.flatten(1)).view(-1, 10, 4)).norm(dim=-1)

    model = ExternalModel(SwitchedCaps(), name="sw", input_shape=(1, 28, 28), num_classes=10).eval()
    x = torch.rand(1, 1, 28, 28)
    assert reaches_straight_through(model, x) and model.missing_adaptive_hooks(x) is None
    assert not reaches_straight_through(_built("byo_models.caps:CapsLengths").eval(), x)


def _mismatched_state(model):
    state = dict(model.state_dict())
    state["extra.weight"] = torch.zeros(1)
    del state["fc.bias"]
    state["conv.weight"] = torch.zeros(1, 1, 1, 1)
    return state


def test_strict_loading_lists_missing_unexpected_and_misshapen_keys(tmp_path):
    model = _built("byo_models.plain:PlainNet")
    torch.save(_mismatched_state(model.module), tmp_path / "w.pt")
    with pytest.raises(CapsbenchError) as err:
        load_weights(model, tmp_path / "w.pt", "weights.ext=w.pt", "ext")
    message = str(err.value)
    assert "\n" not in message and "missing keys fc.bias" in message and "unexpected keys extra.weight" in message
    assert "wrong shapes conv.weight (file (1, 1, 1, 1), model (4, 1, 5, 5))" in message


@pytest.mark.parametrize("suffix", [".pt", ".pth", ".safetensors"])
def test_weights_load_exactly_from_every_format(tmp_path, suffix):
    torch.manual_seed(1)
    source = _built("byo_models.plain:PlainNet").module
    path = tmp_path / f"w{suffix}"
    save_file(source.state_dict(), str(path)) if suffix == ".safetensors" else torch.save(source.state_dict(), path)
    model = _built("byo_models.plain:PlainNet")
    load_weights(model, path, "weights.ext", "ext")
    assert state_sha256(model.module) == state_sha256(source)


def test_a_pickled_object_is_refused_and_a_lightning_wrapper_is_read(tmp_path):
    model = _built("byo_models.plain:PlainNet")
    torch.save({"state_dict": model.module.state_dict(), "epoch": 3}, tmp_path / "wrapped.pt")
    load_weights(model, tmp_path / "wrapped.pt", "weights.ext", "ext")
    torch.save(model.module, tmp_path / "whole.pt")  # the module object, not its state dict: weights_only refuses it
    with pytest.raises(CapsbenchError, match=r"cannot read .*whole\.pt as weights .*save a state dict"):
        load_weights(model, tmp_path / "whole.pt", "weights.ext", "ext")
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(CapsbenchError, match=r"cannot read .*junk\.safetensors as weights"):
        load_weights(model, tmp_path / "junk.safetensors", "weights.ext", "ext")


def test_unit_keys_follow_the_weights_file_bytes_not_its_path(tmp_path):
    model = _built("byo_models.plain:PlainNet").module
    (tmp_path / "moved").mkdir()
    torch.save(model.state_dict(), tmp_path / "a.pt")
    shutil.copy(tmp_path / "a.pt", tmp_path / "moved" / "a.pt")  # the same bytes elsewhere
    torch.save({k: v + 1 for k, v in model.state_dict().items()}, tmp_path / "c.pt")
    keys = {}
    for path in ("a.pt", "moved/a.pt", "c.pt"):
        weights = f"weights.ext={tmp_path / path}"
        cfg = _compose(tmp_path, "register.ext=byo_models.plain:PlainNet", "models=[ext]", weights)
        (unit,) = plan(cfg)
        keys[path] = unit.key
        assert unit.variant == {"training": "external"} and len(unit.config["weights"]["sha256"]) == 64
    assert keys["a.pt"] == keys["moved/a.pt"] != keys["c.pt"]


def test_capsbench_train_fine_tunes_outside_weights_under_a_key_of_their_own(tmp_path, monkeypatch):
    from conftest import make_splits

    from capsbench.run import execute
    from capsbench.run.plan import training_unit

    monkeypatch.setattr(execute, "load_data", lambda dataset, data: make_splits())
    torch.manual_seed(3)
    start = _built("byo_models.plain:PlainNet").module.state_dict()
    torch.save(start, tmp_path / "w.pt")
    settings = ["register.ext=byo_models.plain:PlainNet", "models=[ext]", "train.epochs=1", "train.lr=1e-12"]
    scratch = execute.trained(training_unit(_compose(tmp_path, *settings), "ext", 0))
    tuned = execute.trained(training_unit(_compose(tmp_path, *settings, f"weights.ext={tmp_path / 'w.pt'}"), "ext", 0))
    assert tuned.key != scratch.key and len(tuned.meta["identity"]["init"]["weights_sha256"]) == 64
    assert "init" not in scratch.meta["identity"]
    for name, tensor in tuned.model.module.state_dict().items():  # lr 1e-12: still the weights it started from
        assert torch.allclose(tensor, start[name], atol=1e-6), name
    assert not torch.allclose(scratch.model.module.conv.weight, start["conv.weight"], atol=1e-3)


def test_weights_of_the_wrong_shape_are_refused_before_any_data_is_read(tmp_path, monkeypatch, mnist_root):
    import time

    from typer.testing import CliRunner

    from capsbench.cli import app
    from capsbench.run import model_trial

    def no_data(*args):
        raise AssertionError("the data were read before the weights were checked")

    monkeypatch.setattr(model_trial, "load_data", no_data)
    state = create_model("cnn_9x9", in_channels=1, image_size=28, num_classes=10, channels=[8, 8, 4]).state_dict()
    torch.save(state, tmp_path / "w.pt")  # the budget builds cnn_9x9 with channels [16, 16, 8]
    start = time.monotonic()
    result = CliRunner().invoke(app, ["run", *SMOKE, f"output_dir={tmp_path}", "models=[cnn_9x9]",
                                      f"data.root={mnist_root}", f"weights.cnn_9x9={tmp_path / 'w.pt'}"])
    assert result.exit_code == 2, result.output
    assert "does not fit model 'cnn_9x9'" in result.output and "wrong shapes" in result.output
    assert time.monotonic() - start < 30 and not (tmp_path / "accuracy").exists()


def test_a_module_and_the_file_of_its_state_dict_are_the_same_weights(tmp_path):
    from capsbench.models.external import register_instance
    from capsbench.run.external import external_settings

    torch.manual_seed(5)
    module = _built("byo_models.plain:PlainNet").module
    torch.save(module.state_dict(), tmp_path / "w.pt")
    save_file(module.state_dict(), str(tmp_path / "w.safetensors"))
    cfg = _compose(tmp_path, "register.ext=byo_models.plain:PlainNet", "models=[ext]", f"weights.ext={tmp_path}/w.pt")
    (unit,) = plan(cfg)
    from_file = unit.config["weights"]["tensors_sha256"]
    register_instance("ext_instance", module, state_sha256(module), "attributes")
    from_module = external_settings(_compose(tmp_path, "models=[ext_instance]"), "ext_instance")["weights"]["sha256"]
    other = _compose(tmp_path, "register.ext=byo_models.plain:PlainNet", "models=[ext]",
                     f"weights.ext={tmp_path}/w.safetensors")
    assert from_file == from_module == plan(other)[0].config["weights"]["tensors_sha256"]  # by tensors, any format
    assert unit.config["weights"]["sha256"] != from_file  # the file's own bytes still check it is unchanged
