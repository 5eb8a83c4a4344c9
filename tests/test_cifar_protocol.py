"""The CIFAR augmentation: zero-pad, random crop of the original size, horizontal flip (not for SVHN)."""

import torch

from capsbench.train.protocols import PadCropProtocol, TrainingProtocol, dataset_protocol


def test_pad_crop_protocol_crops_padded_images_and_flips():
    images = torch.arange(8 * 8, dtype=torch.float32).add(1).view(1, 1, 8, 8).repeat(200, 3, 1, 1)
    gen = torch.Generator().manual_seed(0)
    out = PadCropProtocol(pad=2, flip=False).train_batch(images, torch.zeros(200, dtype=torch.long), gen).inputs
    padded = torch.nn.functional.pad(images[0], (2, 2, 2, 2))  # (3, 12, 12)
    windows = {(t, l): padded[:, t : t + 8, l : l + 8] for t in range(5) for l in range(5)}
    found = [next(k for k, w in windows.items() if torch.equal(out[i], w)) for i in range(200)]
    assert out.shape == images.shape and len(set(found)) == 25  # every one of the (2 pad + 1)^2 offsets occurs
    flipped = PadCropProtocol(pad=0, flip=True).train_batch(images, torch.zeros(200, dtype=torch.long), gen).inputs
    mirrored = torch.tensor([torch.equal(f, images[0].flip(-1)) for f in flipped])
    assert all(torch.equal(f, images[0]) or m for f, m in zip(flipped, mirrored)) and 70 < mirrored.sum() < 130
    assert torch.equal(PadCropProtocol().eval_inputs(images), images)


def test_cifar10_and_svhn_train_with_pad_and_crop():
    cifar, svhn = dataset_protocol("cifar10", 2), dataset_protocol("svhn", 2)
    assert cifar.identity() == {"protocol": "pad_crop", "pad": 4, "flip": True}
    assert svhn.identity() == {"protocol": "pad_crop", "pad": 4, "flip": False}  # a mirrored digit is another symbol
    assert type(dataset_protocol("fashion_mnist", 2)) is TrainingProtocol
