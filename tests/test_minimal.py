"""Known answers for each image's smallest adversarial perturbation: the median's distribution-free interval (Conover's
order statistics), the signed-rank test on per-image values counted once per image, the fixed-eps bound, the
records' per-image minimum, finders, too-weak count and robustness curve, and the note under a median's table."""

from dataclasses import replace

import numpy as np
import pytest
import torch
from scipy import stats as sps
from torch import nn

from capsbench.attacks import EngineSettings, build, decisions
from capsbench.models import Classifier, ModelOutput
from capsbench.reporting.formatting import cell_text
from capsbench.reporting.frame import records_frame
from capsbench.reporting.model import Header, Measured, Table
from capsbench.reporting.outputs import suite_layout
from capsbench.reporting.tables import _cells_note, build_tables
from capsbench.suites import SUITES
from capsbench.suites.robustness.minimal import TOO_WEAK, ensemble_bound, minimal_records
from capsbench.util.image_tests import signed_rank_p
from capsbench.util.stats import accuracy_fields, decode_values, distance_fields, median_interval

SETTINGS = EngineSettings(num_classes=10, seed=0, batch_size=8)


def test_median_interval_is_the_tabulated_order_statistics():
    """95 %: n = 10 gives x(2) to x(9) (coverage 97.9 %), n = 100 gives x(40) to x(61) (Conover, table A3)."""
    x10 = np.arange(1.0, 11.0)
    assert median_interval(x10[::-1]) == (2.0, 9.0)
    x100 = np.arange(1.0, 101.0)
    assert median_interval(x100) == (40.0, 61.0)
    k = 40  # the interval's coverage is at least 95 %, and one order statistic narrower is below it
    assert 1 - 2 * sps.binom.cdf(k - 1, 100, 0.5) >= 0.95 > 1 - 2 * sps.binom.cdf(k, 100, 0.5)


def test_median_interval_of_few_values_and_of_unbroken_images():
    assert median_interval(np.array([3.0, 1.0, 2.0])) == (1.0, 3.0)  # too few for 95 %: the whole range
    with_inf = np.array([0.5] * 40 + [np.inf] * 60)  # most images never broken: the upper end is inf
    assert median_interval(with_inf) == (0.5, np.inf)
    with pytest.raises(ValueError, match="no values"):
        median_interval(np.array([]))


def test_distance_fields_keep_every_image():
    d = np.array([0.0, 0.25, 1.5, np.inf])
    fields = distance_fields(d)
    assert fields["value"] == pytest.approx(0.875) and fields["n"] == 4
    np.testing.assert_array_equal(decode_values(str(fields["per_image"]), 4), d.astype(np.float32))


def test_signed_rank_is_wilcoxon_on_each_images_mean_over_the_seeds():
    rng = np.random.default_rng(0)
    a = [rng.uniform(0.5, 2.0, 60) for _ in range(3)]
    b = [v - rng.uniform(0.0, 0.3, 60) for v in a]
    expected = sps.wilcoxon(np.mean(a, axis=0) - np.mean(b, axis=0)).pvalue
    assert signed_rank_p(a, b) == pytest.approx(expected, rel=1e-12)
    # the same values in three seeds are the same images, not three times the evidence
    assert signed_rank_p([a[0]] * 3, [b[0]] * 3) == pytest.approx(signed_rank_p([a[0]], [b[0]]), rel=1e-12)


def test_signed_rank_ranks_unbroken_images_above_every_distance_and_drops_ties():
    a = np.array([np.inf] * 8 + [1.0, 2.0])
    b = np.array([3.0] * 8 + [1.0, 2.0])  # A never broken on 8 images, B broken there: A larger on each
    assert signed_rank_p([a], [b]) == pytest.approx(sps.wilcoxon(np.ones(8)).pvalue)
    assert signed_rank_p([b], [b]) == 1.0  # nothing differs: no evidence, not certainty
    with pytest.raises(ValueError, match="same seeds"):
        signed_rank_p([a, a], [b])


def test_the_fixed_eps_bound_is_the_smallest_eps_that_broke_the_image():
    worst = {0.1: np.array([1, 0, 0, 0, 0], bool), 0.2: np.array([1, 1, 0, 0, 0], bool),
             0.3: np.array([1, 1, 1, 0, 0], bool)}
    clean_ok = np.array([1, 1, 1, 1, 0], bool)
    np.testing.assert_array_equal(ensemble_bound(worst, clean_ok), [0.1, 0.2, 0.3, np.inf, 0.0])


class FoundDistances:
    """A unit's attacks with fixed minimum-norm distances per image (what `run.minimal` returns on the asked rows)."""

    def __init__(self, clean_ok: np.ndarray, found: dict[str, np.ndarray]) -> None:
        self.clean_ok, self.found = clean_ok, found
        self.images = torch.zeros(len(clean_ok), 1)

    def minimal(self, name: str, index: torch.Tensor, progress=None) -> torch.Tensor:
        if progress is not None:
            progress(len(index), len(index), 0)
        return torch.from_numpy(self.found[name][index.numpy()])


def test_records_take_the_per_image_minimum_and_say_who_found_it():
    clean_ok = np.array([1, 1, 1, 1, 1, 0], bool)
    worst = {0.1: np.array([0, 0, 0, 0, 0, 0], bool), 0.2: np.array([1, 0, 1, 0, 0, 0], bool)}  # bound .2 .. .2
    fmn = np.array([0.15, 0.5, 0.3, np.inf, 0.05, 9.0])  # image 2: 0.3 > 1.02 x 0.2, too weak; image 5 clean-wrong
    fab = np.array([0.18, 0.4, 0.25, 0.9, np.inf, 9.0])
    records = minimal_records(FoundDistances(clean_ok, {"fmn": fmn, "fab": fab}), ["fmn", "fab"], worst, [0.1, 0.2])
    by = {(r["metric"], r.get("attack"), r.get("eps")): r for r in records}
    worst_case = decode_values(by[("minimal_distance", "worst_case", None)]["per_image"], 6)
    np.testing.assert_allclose(worst_case, [0.15, 0.4, 0.2, 0.9, 0.05, 0.0], rtol=1e-6)
    fmn_own = decode_values(by[("minimal_distance", "fmn", None)]["per_image"], 6)
    assert fmn_own[5] == 0.0  # a clean mistake is never attacked: distance 0
    assert by[("minimal_found", "fmn", None)]["value"] == pytest.approx(200 / 6)  # images 0 and 4
    assert by[("minimal_found", "fab", None)]["value"] == pytest.approx(200 / 6)  # images 1 and 3
    assert by[("minimal_found", "fixed_eps", None)]["value"] == pytest.approx(100 / 6)  # image 2
    assert 0.25 > TOO_WEAK * 0.2 and by[("minimal_too_weak", None, None)]["value"] == 1.0
    assert by[("minimal_accuracy", None, 0.0)]["value"] == pytest.approx(500 / 6)  # the clean accuracy
    assert by[("minimal_accuracy", None, 0.2)]["value"] == pytest.approx(200 / 6)  # 0.4 and 0.9 exceed 0.2


def test_the_median_table_names_the_order_statistic_interval():
    cell = Measured(0.4, None, 1, (0.2, 0.9, 200))
    median = Table("minimal", "", ["model"], [("capsnet",)], [Header("minimal_distance", "median", "eps")],
                   {(0, "minimal_distance"): cell})
    note = _cells_note(median, compared=False, noisy=True)
    assert "distribution-free" in note and "Wilson" not in note and "the median" in note
    share = Table("clean", "", ["model"], [("capsnet",)], [Header("test_accuracy", "clean", "%")],
                  {(0, "test_accuracy"): Measured(98.0, None, 1, (97.0, 98.7, 200))})
    assert "95 % Wilson interval over 200 test images" in _cells_note(share, compared=False, noisy=True)


def test_each_tables_bold_rule_names_the_per_image_test_its_comparison_runs():
    """The worst case compares outcomes per image (McNemar); the median distance compares distances per image (the
    signed-rank test): each table's note names its own test, never the other's."""
    rng = np.random.default_rng(0)
    records = []
    for model, shift in (("capsnet", 0.3), ("cnn_sabour", 0.0)):
        for seed in range(3):
            common = {"suite": "robustness_l2", "model": model, "dataset": "mnist", "seed": seed}
            records.append({**common, "metric": "clean_accuracy", **accuracy_fields(np.ones(60, bool))})
            records.append({**common, "metric": "robust_accuracy", "attack": "worst_case", "eps": 1.0,
                            **accuracy_fields(rng.random(60) < 0.5 + shift)})
            records.append({**common, "metric": "minimal_distance", "attack": "worst_case",
                            **distance_fields(rng.random(60) + shift)})
    suite = SUITES.get("robustness_l2")
    tables = {t.name: t for t in build_tables(records_frame(records, suite), suite, suite_layout(suite))}
    worst, minimal = (" ".join(tables[name].notes) for name in ("worst_case", "minimal"))
    assert "McNemar" in worst and "signed-rank" not in worst
    assert "signed-rank" in minimal and "McNemar" not in minimal


class Linear(Classifier):
    """logits = W x + b on the flattened image: each image's smallest perturbation that changes the decision is known
    in closed form (away from the box's faces)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(28 * 28, 10)
        with torch.no_grad():
            self.fc.weight.mul_(0.3)

    def forward(self, x, labels=None):
        logits = self.fc(x.flatten(1))
        return ModelOutput(scores=torch.softmax(logits, dim=1), logits=logits)


def closest_boundary(model: Linear, images: torch.Tensor, norm: str) -> torch.Tensor:
    """min over j != y of (f_y - f_j) / ||w_y - w_j||, in the dual norm (L2 for L2, L1 for L-inf)."""
    w, b = model.fc.weight.detach().double(), model.fc.bias.detach().double()
    logits = images.flatten(1).double() @ w.T + b
    y = logits.argmax(1)
    gaps = logits.gather(1, y[:, None]) - logits  # (N, 10)
    dual = 2 if norm == "l2" else 1
    lengths = torch.stack([torch.linalg.vector_norm(w[y] - w[j], ord=dual, dim=1) for j in range(10)], dim=1)
    return torch.where(gaps > 0, gaps / lengths, torch.full_like(gaps, float("inf"))).amin(1)


@pytest.mark.parametrize("norm", ["l2", "linf"])
@pytest.mark.parametrize("name,steps", [("fmn", 200), ("fab", 20)])
def test_minimum_norm_attacks_find_a_linear_models_closed_form_distance(name, steps, norm):
    """Never below the true smallest perturbation (a distance under it would be mis-measured) and within 5 % of it:
    on a linear model the boundary is a hyperplane, so a minimum-norm attack that works finds it."""
    model = Linear().eval()
    images = 0.5 + 0.02 * torch.randn(8, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    labels = decisions(model, images)
    truth = closest_boundary(model, images, norm)
    box = 0.5 - (images - 0.5).abs().amax()
    assert (truth < box).all()  # the box's faces are out of reach
    found = build(name, {"steps": steps}).distances(model, images, labels, replace(SETTINGS, norm=norm)).double()
    assert (found >= truth * (1 - 1e-4)).all()
    assert (found <= truth * 1.05).all(), (found / truth).tolist()


def box_distance(model: Linear, images: torch.Tensor) -> torch.Tensor:
    """Each image's smallest L2 perturbation within [0, 1] that changes a linear model's decision: per other class j
    the nearest point of {f_j >= f_y} in the box is clip(x + t v) with v = w_j - w_y (the box's KKT conditions), t the
    smallest that reaches it (bisection); the minimum over j."""
    w, b = model.fc.weight.detach().double(), model.fc.bias.detach().double()
    flat = images.flatten(1).double()
    decided = (flat @ w.T + b).argmax(1)
    out = torch.full((len(flat),), float("inf"), dtype=torch.double)
    for i, (x, y) in enumerate(zip(flat, decided.tolist())):
        for j in set(range(10)) - {y}:
            v, need = w[j] - w[y], b[y] - b[j]
            gap = lambda t: float(v @ (x + t * v).clamp(0, 1) - need)  # noqa: E731, B023
            if gap(1e6) < 0:
                continue  # the box holds no point of class j's half-space
            low, high = 0.0, 1.0
            while gap(high) < 0:
                high *= 2
            for _ in range(60):
                low, high = (low, (low + high) / 2) if gap((low + high) / 2) >= 0 else ((low + high) / 2, high)
            out[i] = min(out[i], float(((x + high * v).clamp(0, 1) - x).norm()))
    return out


def test_fmn_finds_an_adversarial_where_the_box_stalls_it_from_the_clean_image():
    """MNIST-like images, most pixels at 0 or 1: FMN's steps push them out of [0, 1], the clip takes it back, and from
    the clean image it stalls below the boundary (it found nothing for any of these images); from the nearest image of
    another class it finds one for each, never below the box's closed-form distance."""
    model = Linear().eval()
    u = torch.rand(8, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    images = torch.where(u < 0.6, torch.zeros_like(u), torch.where(u > 0.85, torch.ones_like(u), u))
    labels = decisions(model, images)
    truth = box_distance(model, images)
    found = build("fmn", {"steps": 100}).distances(model, images, labels, replace(SETTINGS, norm="l2")).double()
    assert torch.isfinite(found).all() and (found >= truth * (1 - 1e-4)).all(), (found / truth).tolist()


def test_a_median_distances_interval_is_shown_at_its_own_precision():
    """1.335 [1.311, 1.384], not 1.335 [1.3, 1.4]; a percentage's interval keeps one decimal."""
    assert cell_text(Measured(1.335, None, 1, (1.3108, 1.3844, 1000)), "eps", 1).interval == ("1.311", "1.384")
    assert cell_text(Measured(98.8, None, 1, (97.914, 99.31, 1000)), "%", 1).interval == ("97.9", "99.3")
    assert cell_text(Measured(0.0, None, 1, (0.0, float("inf"), 20)), "eps", 1).interval == ("0", "inf")
