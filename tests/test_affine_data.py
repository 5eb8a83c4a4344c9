"""The 40x40 canvas, the affine warp, the generated affNIST-style set and the real affNIST .mat loader."""

import math

import numpy as np
import pytest
import torch
from scipy.io import savemat

from capsbench.data.affnist import affnist_test_files, load_affnist_test
from capsbench.data.affnist_style import AffineRanges, cached_affnist_style, content_hash, generate
from capsbench.data.canvas import affine_matrix, centre_on_canvas, random_place_on_canvas, warp
from capsbench.errors import CapsbenchError


def digits(n=24, seed=0):
    """Random 'digits': ink in the central 20x20 of a 28x28 image, like MNIST."""
    g = torch.Generator().manual_seed(seed)
    x = torch.zeros(n, 1, 28, 28, dtype=torch.uint8)
    x[:, :, 4:24, 4:24] = torch.randint(0, 256, (n, 1, 20, 20), generator=g, dtype=torch.uint8)
    return x, torch.randint(0, 10, (n,), generator=g)


def test_centre_and_random_placement_keep_every_pixel():
    x, _ = digits(400)
    centred = centre_on_canvas(x, 40)
    assert torch.equal(centred[:, :, 6:34, 6:34], x) and centred.sum() == x.sum()
    placed = random_place_on_canvas(x, 40, torch.Generator().manual_seed(0))
    assert torch.equal(placed.flatten(1).sum(1), x.flatten(1).sum(1))  # nothing cut off
    ink = placed[:, 0] > 0
    rows = ink.any(dim=2).float().argmax(dim=1) - 4  # first ink row minus the digit's own margin = offset
    cols = ink.any(dim=1).float().argmax(dim=1) - 4
    assert rows.min() == 0 and rows.max() == 12 and cols.min() == 0 and cols.max() == 12


def test_identity_warp_is_exact_and_known_moves_are_exact():
    x, _ = digits(8)
    canvas = centre_on_canvas(x, 40)
    assert torch.equal(warp(canvas, affine_matrix()), canvas)
    assert torch.equal(warp(canvas, affine_matrix(rotation_deg=0.0, shear=0.0, scale_x=1.0, scale_y=1.0)), canvas)
    dot = torch.zeros(1, 1, 41, 41, dtype=torch.uint8)
    dot[0, 0, 20, 25] = 200  # (x, y) = (25, 20): 5 px right of the centre (20, 20)
    up = warp(dot, affine_matrix(rotation_deg=90.0))  # counter-clockwise as displayed: right -> up
    assert up[0, 0, 15, 20] == 200 and up.sum() == 200
    moved = warp(dot, affine_matrix(), torch.tensor([3.0, -2.0]))
    assert moved[0, 0, 18, 28] == 200 and moved.sum() == 200
    half = warp(dot, affine_matrix(), torch.tensor([0.5, 0.0]))  # bilinear: half the ink in each neighbour
    assert half[0, 0, 20, 25] == 100 and half[0, 0, 20, 26] == 100


def test_affine_matrix_composes_scale_then_shear_then_rotation():
    a = affine_matrix(rotation_deg=30.0, shear=0.1, scale_x=1.2, scale_y=0.9)
    c, s = math.cos(math.radians(30)), math.sin(math.radians(30))
    expected = (
        torch.tensor([[c, s], [-s, c]], dtype=torch.float64)
        @ torch.tensor([[1, 0.1], [0, 1]], dtype=torch.float64)
        @ torch.diag(torch.tensor([1.2, 0.9], dtype=torch.float64))
    )
    assert torch.allclose(a, expected, atol=1e-12)


def test_generator_is_deterministic_within_ranges_and_keeps_ink_on_canvas():
    x, y = digits(60)
    ranges = AffineRanges()
    a, b = generate(x, y, ranges), generate(x, y, ranges)
    assert a.sha256 == b.sha256 and torch.equal(a.images, b.images) and torch.equal(a.params, b.params)
    assert a.sha256 == content_hash(a.images, a.labels) and torch.equal(a.labels, y)
    assert a.images.shape == (60, 1, 40, 40) and a.images.dtype == torch.uint8
    rot, shear, sx, sy, tx, ty = a.params.T
    assert rot.abs().max() <= 20 and shear.abs().max() <= 0.2
    assert sx.min() >= 0.8 and sx.max() <= 1.2 and sy.min() >= 0.8 and sy.max() <= 1.2
    assert rot.std() > 5 and shear.std() > 0.05 and tx.std() > 1 and ty.std() > 1  # the ranges are actually used
    assert torch.equal(tx, tx.round()) and torch.equal(ty, ty.round())
    # No ink cut off: the same warp on a canvas with a 20-px border loses nothing that the 40x40 one keeps.
    wide = warp(
        centre_on_canvas(x, 80),
        torch.stack(
            [
                affine_matrix(rotation_deg=float(r), shear=float(s), scale_x=float(p), scale_y=float(q))
                for r, s, p, q in a.params[:, :4]
            ]
        ),
        a.params[:, 4:],
    )
    assert torch.equal(wide[:, :, 20:60, 20:60], a.images) and wide.sum() == a.images.sum()
    assert generate(x, y, AffineRanges(seed=1)).sha256 != a.sha256


def test_generated_set_is_cached_and_a_damaged_cache_is_regenerated(tmp_path):
    x, y = digits(10)
    first = cached_affnist_style(x, y, AffineRanges(), tmp_path)
    [path] = list((tmp_path / "affnist_style").glob("*.pt"))
    again = cached_affnist_style(x, y, AffineRanges(), tmp_path)
    assert again.sha256 == first.sha256 and torch.equal(again.images, first.images)
    stored = torch.load(path, weights_only=True)
    stored["images"][0, 0, 0, 0] += 1
    torch.save(stored, path)
    assert cached_affnist_style(x, y, AffineRanges(), tmp_path).sha256 == first.sha256


def test_generated_hash_of_real_mnist_is_the_same_on_every_machine(mnist_root):
    from capsbench.data import load_splits

    s = load_splits("mnist", root=mnist_root, download=False, val_size=5000)
    made = generate(s.test_x[:200], s.test_y[:200], AffineRanges())
    # Recorded on the development machine (x86-64, torch CPU); a different value means a platform-dependent warp.
    assert made.sha256 == "cc545b914aa62d2eee8566fb991d0aea523312be28ff167737827f12443f17bf"


def write_affnist_mat(path, images, labels):
    """A file in the official layout: struct affNISTdata, image (1600, N) uint8 one row-major 40x40 image per column."""
    n = len(labels)
    savemat(
        str(path),
        {
            "affNISTdata": {
                "image": images.reshape(n, 1600).T.astype(np.uint8),
                "label_int": labels.reshape(1, n).astype(np.uint8),
                "label_one_of_n": np.eye(10, dtype=np.uint8)[labels].T,
                "human_readable_transform": np.zeros((7, n)),
            }
        },
    )


def test_real_affnist_loader_reads_single_file_and_numbered_batches(tmp_path):
    assert load_affnist_test(tmp_path) is None
    images = np.zeros((5, 40, 40), dtype=np.uint8)
    images[np.arange(5), 3, 30] = np.arange(1, 6) * 40  # a mark at row 3, column 30
    labels = np.array([7, 1, 0, 9, 4])
    batches = tmp_path / "affNIST" / "test_batches"
    batches.mkdir(parents=True)
    for number, part in ((1, slice(0, 2)), (2, slice(2, 4)), (10, slice(4, 5))):
        write_affnist_mat(batches / f"{number}.mat", images[part], labels[part])
    assert [p.name for p in affnist_test_files(tmp_path)] == ["1.mat", "2.mat", "10.mat"]
    x, y = load_affnist_test(tmp_path)
    assert x.shape == (5, 1, 40, 40) and x.dtype == torch.uint8 and y.tolist() == labels.tolist()
    assert x[:, 0, 3, 30].tolist() == [40, 80, 120, 160, 200] and x.sum() == sum([40, 80, 120, 160, 200])
    x3, y3 = load_affnist_test(tmp_path, limit=3)
    assert torch.equal(x3, x[:3]) and torch.equal(y3, y[:3])
    write_affnist_mat(tmp_path / "affNIST" / "test.mat", images[::-1].copy(), labels[::-1].copy())
    x, y = load_affnist_test(tmp_path)  # test.mat wins over the batches
    assert y.tolist() == labels[::-1].tolist()


def test_real_affnist_loader_rejects_wrong_files(tmp_path):
    (tmp_path / "affNIST").mkdir()
    savemat(str(tmp_path / "affNIST" / "test.mat"), {"something": np.zeros(3)})
    with pytest.raises(CapsbenchError, match="affNISTdata"):
        load_affnist_test(tmp_path)
    savemat(
        str(tmp_path / "affNIST" / "test.mat"),
        {"affNISTdata": {"image": np.zeros((784, 2), np.uint8), "label_int": np.zeros((1, 2), np.uint8)}},
    )
    with pytest.raises(CapsbenchError, match="1600"):
        load_affnist_test(tmp_path)
