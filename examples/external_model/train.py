"""Train TinyCaps on real MNIST with plain PyTorch (no capsbench), save its state dict, and report its clean accuracy on
the first N test images, computed here on the same weights and images that capsbench then evaluates.

    python train.py --data ../../../shared/datasets --out tinycaps.pt            # train, save, evaluate
    python train.py --data ../../../shared/datasets --out tinycaps.pt --evaluate  # evaluate saved weights only
"""

from __future__ import annotations

import argparse
import logging
import time

import torch
from tinycaps.model import TinyCaps
from torch.nn import functional as F
from torchvision.datasets import MNIST

log = logging.getLogger("train")


def margin_loss(lengths: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Sabour et al.'s margin loss (m+ 0.9, m- 0.1, lambda 0.5), summed over classes, averaged over the batch."""
    t = F.one_hot(labels, lengths.shape[1]).float()
    loss = t * F.relu(0.9 - lengths) ** 2 + 0.5 * (1 - t) * F.relu(lengths - 0.1) ** 2
    return loss.sum(dim=1).mean()


@torch.no_grad()
def accuracy(model: TinyCaps, images: torch.Tensor, labels: torch.Tensor, batch_size: int) -> tuple[int, int]:
    """(correct, total) of the argmax of the capsule lengths, images uint8 (N, 1, 28, 28) scaled to [0, 1]."""
    model.eval()
    correct = 0
    for i in range(0, len(images), batch_size):
        x = images[i:i + batch_size].float().div(255.0)
        correct += int((model(x)["lengths"].argmax(dim=1) == labels[i:i + batch_size]).sum())
    return correct, len(images)


def main() -> None:
    """Train (or, with --evaluate, load) TinyCaps, then print its clean accuracy on the first N test images."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="the directory holding MNIST/raw (torchvision layout)")
    parser.add_argument("--out", default="tinycaps.pt", help="where the state dict goes (.pt, or .safetensors)")
    parser.add_argument("--train-images", type=int, default=5000, help="the first N training images")
    parser.add_argument("--test-images", type=int, default=1000, help="accuracy on the first N test images")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--conv-channels", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--evaluate", action="store_true", help="only evaluate the weights at --out")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    torch.manual_seed(args.seed)
    model = TinyCaps(conv_channels=args.conv_channels)
    test = MNIST(args.data, train=False, download=False)
    test_x, test_y = test.data[:args.test_images].unsqueeze(1), test.targets[:args.test_images]
    if args.evaluate:
        model.load_state_dict(load(args.out))
    else:
        train = MNIST(args.data, train=True, download=False)
        x, y = train.data[:args.train_images].unsqueeze(1), train.targets[:args.train_images]
        optimiser = torch.optim.Adam(model.parameters(), lr=1e-3)
        start = time.perf_counter()
        for epoch in range(args.epochs):
            model.train()
            order = torch.randperm(len(x))
            for i in range(0, len(x), 64):
                batch = order[i:i + 64]
                loss = margin_loss(model(x[batch].float().div(255.0))["lengths"], y[batch])
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
            log.info("epoch %d: last batch loss %.4f, %.0f s", epoch + 1, loss.item(), time.perf_counter() - start)
        save(model.state_dict(), args.out)
        log.info("saved %s", args.out)
    correct, total = accuracy(model, test_x, test_y, batch_size=500)
    print(f"clean accuracy on the first {total} test images: {correct}/{total} = {100 * correct / total:.2f} %")


def save(state: dict[str, torch.Tensor], path: str) -> None:
    """A state dict to .safetensors (when the name says so) or a torch.save file."""
    if path.endswith(".safetensors"):
        from safetensors.torch import save_file

        save_file(state, path)
    else:
        torch.save(state, path)


def load(path: str) -> dict[str, torch.Tensor]:
    """The state dict saved by save()."""
    if path.endswith(".safetensors"):
        from safetensors.torch import load_file

        return load_file(path)
    return torch.load(path, weights_only=True)


if __name__ == "__main__":
    main()
