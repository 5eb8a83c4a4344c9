"""Counts how far the attack engine and the training step are from a GPU's way of working, on any device: the model's
forward calls and the operations that would make the host wait for a CUDA device (capsbench.cost.syncs), over

- the probe: the robustness suite at the smoke budget on a small plain model (cnn_9x9 at smoke sizes, trained briefly
  here), 200 test images, 25-step APGD with 100 steps from eps 0.15, params.batch_size=4096, through
  capsbench.evaluate, setup included;
- training: capsbench's training loop on that model, per optimizer step (from epochs of 1,024 and 2,048 images: their
  difference) and per epoch's end (validation on 256 images, the best weights, the epoch's one read).

Prints one line per count and, last, `engine_counters forward_calls=F syncs=S syncs_per_forward=R
train_syncs_per_step=T`.

    CAPSBENCH_DATA=DIR uv run python benchmarks/engine_counters.py [--device cuda] [--out DIR]
"""

from __future__ import annotations

import capsbench  # noqa: F401  (first: sets OMP_WAIT_POLICY before torch loads OpenMP)

# isort: split
import argparse
import tempfile
import warnings

import torch
from omegaconf import OmegaConf

from capsbench.config.compose import compose
from capsbench.config.request import parse_command_line
from capsbench.cost.syncs import ForwardCounter, SyncCounter
from capsbench.data import DATASETS, load_splits
from capsbench.models import MODELS, create_model
from capsbench.train.loop import fit
from capsbench.train.protocols import dataset_protocol

PROBE = {"budget": "smoke", "data.test_subset": 200, "params.batch_size": 4096, "seeds": [0],
         "params.attack_args.apgd": {"steps": 25, "long_steps": 100, "long_eps": 0.15},
         "params.attack_args.apgd_targeted": {"steps": 25, "long_steps": 100, "long_eps": 0.15},
         "params.compact_every": 8, "params.speculate": True}  # the engine as on a GPU, whatever the device


def smoke_cnn(device: str) -> torch.nn.Module:
    """cnn_9x9 at the smoke budget's sizes for MNIST, seeded."""
    cfg = compose(parse_command_line(["budget=smoke"]), require_suite=False)
    spec = DATASETS.get("mnist")
    args = MODELS.get("cnn_9x9").arguments()
    args.update(OmegaConf.to_container(cfg.model_args).get("cnn_9x9") or {})
    args.update(in_channels=spec.in_channels, image_size=spec.image_size, num_classes=spec.num_classes)
    torch.manual_seed(0)
    return create_model("cnn_9x9", **args).to(device)


def epoch_syncs(model: torch.nn.Module, device: str, images: int) -> tuple[int, int]:
    """(optimizer steps, syncing operations) of one epoch of capsbench's loop on `images` training images, its
    validation on 256 images and the epoch's end included."""
    cfg = compose(parse_command_line(["budget=smoke", f"device={device}", "train.epochs=1"]), require_suite=False)
    splits = load_splits("mnist", root=cfg.data.root, download=False, val_size=cfg.data.val_size,
                         train_subset=images, val_subset=256)
    protocol = dataset_protocol("mnist", cfg.data.max_shift)
    with SyncCounter() as syncs:
        fit(model, splits, cfg, protocol, seed=0)
    return -(-images // cfg.train.batch_size), syncs.total


def train_counts(model: torch.nn.Module, device: str) -> tuple[float, int]:
    """(syncing operations per optimizer step, per epoch's end): from epochs of 1,024 and 2,048 images, whose
    validation and end are the same, so their difference is the steps' own."""
    few, at_few = epoch_syncs(model, device, 1024)
    many, at_many = epoch_syncs(model, device, 2048)
    per_step = (at_many - at_few) / (many - few)
    return per_step, round(at_few - per_step * few)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default=None, help="output folder of the probe's run (default: a temporary one)")
    args = parser.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="capsbench-counters-")
    model = smoke_cnn(args.device)
    per_step, per_epoch = train_counts(model, args.device)
    model.eval()
    cuda = args.device.startswith("cuda")
    with ForwardCounter(type(model)) as calls, SyncCounter() as syncs, warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        if cuda:  # CUDA's own count of the synchronising calls, beside capsbench's
            torch.cuda.set_sync_debug_mode("warn")
        try:
            capsbench.evaluate(model, "robustness", name="probe_cnn", progress=False, device=args.device,
                               output_dir=f"{out}/probe", cache_dir=f"{out}/ckpt", **PROBE)
        finally:
            if cuda:
                torch.cuda.set_sync_debug_mode("default")
    if cuda:
        flagged = sum("synchroniz" in str(w.message) for w in seen)
        print(f"torch.cuda.set_sync_debug_mode: {flagged} synchronising calls warned during the probe")
    for kind, count in syncs.counts.most_common():
        print(f"probe syncs {kind}: {count}")
    print(f"training: {per_step:.3f} syncing operations per optimizer step, {per_epoch} per epoch (validation, the "
          "best weights' copy to the host, the epoch's one read)")
    print(f"engine_counters forward_calls={calls.count} syncs={syncs.total} "
          f"syncs_per_forward={syncs.total / max(calls.count, 1):.3f} train_syncs_per_step={per_step:.3f}")


if __name__ == "__main__":
    main()
