"""Training-step options: auto threads, compile, bf16, the device-resident data path; determinism and the checkpoint
key."""

import os

import pytest
import torch
from composing import compose

from capsbench.config.schema import TrainConfig
from capsbench.data import random_shift
from capsbench.errors import CapsbenchError
from capsbench.models import MODELS, create_model
from capsbench.train.loop import fit, make_optimizer
from capsbench.train.protocols import Batch, TrainingProtocol
from capsbench.train.step import TrainStep, auto_threads, cpu_quota
from capsbench.train.trained import default_protocol, training_identity
from capsbench.util import precision
from capsbench.util.hashing import content_key

TINY_CAPSNET = MODELS.get("capsnet").test_args


def test_cgroup_quota_rounds_up_and_max_means_none(tmp_path):
    path = tmp_path / "cpu.max"
    path.write_text("150000 100000\n")
    assert cpu_quota(path) == 2
    path.write_text("max 100000\n")
    assert cpu_quota(path) is None
    assert cpu_quota(tmp_path / "absent") is None


def test_auto_threads_never_exceed_the_cpus_this_process_may_use():
    assert 1 <= auto_threads() <= min(torch.get_num_threads(), len(os.sched_getaffinity(0)))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["train.precision=fp16"], "train.precision: precision=fp16 is not supported"),
        (["train.precision=fp64"], "train.precision: precision must be one of fp32, bf16"),
        (["train.compile=maybe"], "train.compile"),
    ],
)
def test_bad_training_options_name_the_key(overrides, message, tmp_path):
    with pytest.raises(CapsbenchError, match=message):
        compose(["suite=accuracy", "device=cpu", f"output_dir={tmp_path}", *overrides])


def cpuinfo(tmp_path, flags: str):
    path = tmp_path / "cpuinfo"
    path.write_text(f"processor\t: 0\nmodel name\t: a CPU\nflags\t\t: fpu sse2 avx2 {flags}\n")
    return path


@pytest.mark.parametrize("overrides", [["train.precision=bf16"], ["model_train.capsnet.precision=bf16"],
                                       ["suite=efficiency", "params.precision=bf16"]])
def test_bf16_is_refused_on_a_cpu_without_bf16_instructions(tmp_path, monkeypatch, overrides):
    monkeypatch.setattr(precision, "CPUINFO", cpuinfo(tmp_path, "avx512f"))
    with pytest.raises(CapsbenchError, match=r"bf16 needs a GPU or a CPU with bf16 instructions.*reports none"):
        compose(["suite=accuracy", "device=cpu", f"output_dir={tmp_path}", *overrides])


@pytest.mark.skipif(torch.cuda.is_available(), reason="device=auto resolves to cuda here")
def test_bf16_is_accepted_on_a_cpu_with_bf16_instructions_once_auto_resolves(tmp_path, monkeypatch):
    monkeypatch.setattr(precision, "CPUINFO", cpuinfo(tmp_path, "avx512_bf16 amx_bf16"))
    assert precision.cpu_bf16_instructions() == ["AMX-BF16", "AVX512-BF16"]
    cfg = compose(["suite=accuracy", "device=auto", f"output_dir={tmp_path}", "train.precision=bf16"])
    assert cfg.device == "cpu" and cfg.train.precision == "bf16"
    monkeypatch.setattr(precision, "CPUINFO", cpuinfo(tmp_path, "avx2"))
    with pytest.raises(CapsbenchError, match="device=cpu"):
        compose(["suite=accuracy", "device=auto", f"output_dir={tmp_path}", "train.precision=bf16"])


def test_compile_and_precision_key_the_checkpoint_only_when_not_default(smoke_cfg, tiny_splits):
    protocol = default_protocol(smoke_cfg)
    base = training_identity(smoke_cfg, "capsnet", 0, tiny_splits, protocol)
    assert "compile" not in base["train"] and "precision" not in base["train"]
    smoke_cfg.train.compile = True
    compiled = training_identity(smoke_cfg, "capsnet", 0, tiny_splits, protocol)
    smoke_cfg.train.compile, smoke_cfg.train.precision = False, "bf16"
    bf16 = training_identity(smoke_cfg, "capsnet", 0, tiny_splits, protocol)
    assert compiled["train"]["compile"] is True and bf16["train"]["precision"] == "bf16"
    assert len({content_key(base), content_key(compiled), content_key(bf16)}) == 3


def _trained_weights(cfg, splits, name="capsnet", **args):
    torch.manual_seed(0)
    model = create_model(name, **args).to(cfg.device)  # fit trains the model where it is, as obtain_model hands it
    meta = fit(model, splits, cfg, default_protocol(cfg), seed=0)
    return [p.detach().clone() for p in model.state_dict().values()], meta


def test_two_runs_with_the_same_settings_give_bitwise_identical_weights(smoke_cfg, tiny_splits):
    smoke_cfg.train.epochs, smoke_cfg.train.batch_size = 2, 16
    first, meta = _trained_weights(smoke_cfg, tiny_splits, **TINY_CAPSNET)
    second, _ = _trained_weights(smoke_cfg, tiny_splits, **TINY_CAPSNET)
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    assert meta["threads"] == torch.get_num_threads()  # recorded with the checkpoint (summation order), not keyed


def test_fused_adam_follows_the_per_parameter_loop():
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(50, 7)), torch.nn.Parameter(torch.randn(3))]
    twins = [torch.nn.Parameter(p.detach().clone()) for p in params]
    fused, loop = (
        make_optimizer(params, TrainConfig(lr=1e-3), "cpu")[0],
        torch.optim.Adam(twins, lr=1e-3, foreach=False),
    )
    assert fused.defaults["fused"]
    for step in range(5):
        for p, q in zip(params, twins):
            p.grad = q.grad = torch.full_like(p, 0.1 * (step + 1)) + torch.sin(p.detach())
        fused.step()
        loop.step()
    for p, q in zip(params, twins):
        assert torch.allclose(p, q, rtol=0, atol=1e-7)


def test_a_generator_on_the_data_device_augments_there():
    """On CPU the device generator is the CPU generator: the same shifts as before the fast path existed."""
    x = torch.rand(8, 1, 12, 12)
    gen = torch.Generator(device=x.device).manual_seed(3)
    legacy = torch.Generator().manual_seed(3)
    rows, cols = torch.randint(0, 5, (2, 8, 1, 1), generator=legacy).view(2, 8).tolist()  # the draw it always made
    padded = torch.nn.functional.pad(x, (2, 2, 2, 2))
    expected = torch.stack([padded[i, :, r : r + 12, c : c + 12] for i, (r, c) in enumerate(zip(rows, cols))])
    assert torch.equal(random_shift(x, 2, gen), expected)


def test_bf16_step_keeps_routing_and_the_loss_in_fp32():
    """bf16 autocast on the CPU (the CUDA path is the same code): routing, squash and the loss in fp32."""
    torch.manual_seed(0)
    model = create_model("capsnet", **TINY_CAPSNET)
    step = TrainStep(
        model, make_optimizer(model.parameters(), TrainConfig(lr=1e-3), "cpu")[0], device="cpu", precision="bf16"
    )
    images, labels = torch.rand(6, 1, 28, 28), torch.arange(6)
    out, loss = step(Batch(images, labels))
    assert out.poses.dtype == torch.float32 and loss.dtype == torch.float32 and torch.isfinite(loss)
    assert all(p.grad.dtype == torch.float32 and torch.isfinite(p.grad).all() for p in model.parameters())


def test_compile_failure_is_a_capsbench_error():
    import torch._inductor.config as inductor_config

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = create_model("cnn_9x9", channels=(2,), fc=(), image_size=10, kernel_size=3)
    step = TrainStep(
        model, make_optimizer(model.parameters(), TrainConfig(lr=1e-3), "cpu")[0], device="cpu", compile_model=True
    )
    # torch's own patch() restores its config exactly (monkeypatch left fx_graph_cache hidden for later compiles)
    with inductor_config.patch({"cpp.cxx": (None, "/nonexistent/c++"), "fx_graph_cache": False}):
        with pytest.raises(CapsbenchError, match="train.compile=true.*C\\+\\+ compiler"):
            step(Batch(torch.rand(4, 1, 10, 10), torch.zeros(4, dtype=torch.long)))
    torch._dynamo.reset()


@pytest.mark.slow
def test_compiled_training_runs_on_cpu_and_is_deterministic(smoke_cfg, tiny_splits):
    smoke_cfg.train.epochs, smoke_cfg.train.batch_size, smoke_cfg.train.compile = 1, 32, True
    args = {"channels": (4, 4, 2), "fc": (16,), "dropout": 0.0}  # compiled dropout draws other masks
    first, _ = _trained_weights(smoke_cfg, tiny_splits, "cnn_9x9", **args)
    second, _ = _trained_weights(smoke_cfg, tiny_splits, "cnn_9x9", **args)
    smoke_cfg.train.compile = False
    eager, _ = _trained_weights(smoke_cfg, tiny_splits, "cnn_9x9", **args)
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(first, eager))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_fast_path_augments_on_the_device_and_trains_in_bf16(smoke_cfg, tiny_splits):
    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand(4, 1, 28, 28, device="cuda")
    assert TrainingProtocol(max_shift=2).train_batch(x, torch.arange(4, device="cuda"), gen).inputs.is_cuda
    smoke_cfg.device, smoke_cfg.train.precision, smoke_cfg.train.epochs = "cuda", "bf16", 1
    weights, meta = _trained_weights(smoke_cfg, tiny_splits, **TINY_CAPSNET)
    assert all(torch.isfinite(w).all() for w in weights if w.is_floating_point())
