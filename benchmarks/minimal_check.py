"""Are the suite's smallest perturbations (params.minimal: FMN and FAB, bounded by the fixed-eps attacks) as small as a
minimum-norm attack it does not use finds? Attacks a run's models again with Carlini and Wagner's L2 attack ("Towards
Evaluating the Robustness of Neural Networks", IEEE S&P 2017, arXiv:1608.04644) as foolbox has it: a binary search
over the constant c, every step run (no early abort), each image's smallest successful perturbation over the search,
judged by the model's own decision. Per model and seed: the suite's median smallest L2 perturbation (its records) and
CW's, each with its distribution-free 95 % interval, and the images on which CW found a perturbation more than 5 %
smaller than the suite's (`cw_smaller`: the suite's attacks were too weak there; expected near 0), beside the images
on which CW found any (`cw_found`: a comparison only where it did). Ends with a Markdown table and
`minimal_check <model> s<seed> suite=X cw=Y cw_found=F cw_smaller=K n=N` per unit.

    CAPSBENCH_DATA=DIR uv run python benchmarks/minimal_check.py --records RUN/robustness_l2/records.jsonl
        [--set key=value ...] [--cache-dir DIR] [--images K] [--steps 200] [--lr 0.05] [--c 1] [--search 5]

--set repeats the run's own settings (budget, data.test_subset, ...) so that the same checkpoints and test images are
found; the checkpoints must be in the cache (the run trained them). --images K checks the first K test images only.
torchattacks' CW is not used: it returns at the first check where its loss did not fall, which on a quick CapsNet
left 40 of 40 images unbroken where this search breaks all 40.
"""

from __future__ import annotations

import capsbench  # noqa: F401  (first: sets OMP_WAIT_POLICY before torch loads OpenMP)

# isort: split
import time

import foolbox
import numpy as np
import torch
from held_out import cached_units, check_parser, fail, run_records

from capsbench.attacks import WORST_CASE, decisions
from capsbench.attacks.base import without_unused_heads
from capsbench.data import as_images
from capsbench.models import LogitsAdapter
from capsbench.run.execute import load_data, trained
from capsbench.util.stats import decode_values, median_interval

SMALLER = 0.95  # CW's distance below 0.95 x the suite's counts as the suite's attacks missing a smaller perturbation
BATCH = 250


def cw_distances(model, images: torch.Tensor, labels: torch.Tensor, c: float, search: int, steps: int,
                 lr: float) -> np.ndarray:
    """(N,) per image the L2 norm of the smallest perturbation CW found (binary search over c from `c`, `search`
    rounds of `steps` Adam steps of `lr`) that flips the model's decision; inf where none did; 0 where the clean image
    is already wrong."""
    best = np.full(len(labels), np.inf)
    attack = foolbox.attacks.L2CarliniWagnerAttack(binary_search_steps=search, steps=steps, stepsize=lr,
                                                   initial_const=c, abort_early=False)
    with without_unused_heads(model):
        best[(decisions(model, images) != labels).numpy()] = 0.0
        fmodel = foolbox.PyTorchModel(LogitsAdapter(model).eval(), bounds=(0.0, 1.0))
        for i in range(0, len(labels), BATCH):
            x, y = images[i:i + BATCH], labels[i:i + BATCH]
            _, adversarial, _ = attack(fmodel, x, y, epsilons=None)
            length = (adversarial - x).flatten(1).norm(dim=1)
            flipped = (decisions(model, adversarial) != y) & (length > 0)
            found = np.where(flipped.numpy(), length.detach().numpy(), np.inf)
            best[i:i + BATCH] = np.minimum(best[i:i + BATCH], found)
    return best


def median_text(d: np.ndarray) -> str:
    """'1.23 [1.10, 1.35]': the median and its distribution-free 95 % interval."""
    low, high = median_interval(d)
    return f"{np.median(d):.3g} [{low:.3g}, {high:.3g}]"


def main() -> None:
    parser = check_parser(__doc__.splitlines()[0], "L2")
    parser.add_argument("--images", type=int, default=None, help="check the first K test images only")
    parser.add_argument("--steps", type=int, default=200, help="CW's Adam steps per round of the search")
    parser.add_argument("--lr", type=float, default=0.05, help="CW's Adam step size (foolbox's default 0.01 leaves "
                        "most MNIST images unbroken within a few hundred steps)")
    parser.add_argument("--c", type=float, default=1.0, help="the constant the binary search starts from")
    parser.add_argument("--search", type=int, default=5, help="rounds of the binary search over c")
    args = parser.parse_args()
    found = run_records(args.records, "minimal_distance", "run the suite with params.minimal=[fmn,fab]")
    suite_rows = [r for r in found if r.get("attack") == WORST_CASE]
    suites = {r["suite"] for r in suite_rows}
    if suites != {"robustness_l2"}:
        fail(f"CW is an L2 attack: the records must be of suite=robustness_l2, not {sorted(suites)}")
    units = cached_units("robustness_l2", suite_rows, args)
    table = ["| model | seed | images | suite (FMN, FAB, fixed-eps bound) | CW (held out) | CW found | "
             "CW > 5 % smaller | seconds |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for unit in units:
        ucfg = unit.run_config()
        record = next(r for r in suite_rows if r["model"] == unit.model and int(r["seed"]) == unit.seed)
        splits = load_data(ucfg.dataset, ucfg.data)
        if int(record["n"]) != len(splits.test_y):
            fail(f"the records measured {record['n']} test images, these settings draw "
                 f"{len(splits.test_y)}: pass the run's data.* settings with --set")
        k = min(args.images or len(splits.test_y), len(splits.test_y))
        images, labels = as_images(splits.test_x[:k]), splits.test_y[:k]
        suite = decode_values(record["per_image"], int(record["n"]))[:k]
        model = trained(unit).model.eval()
        start = time.perf_counter()
        cw = cw_distances(model, images, labels, args.c, args.search, args.steps, args.lr)
        seconds = time.perf_counter() - start
        smaller, found = int((cw < SMALLER * suite).sum()), int(np.isfinite(cw).sum())
        table.append(f"| {unit.model} | {unit.seed} | {k} | {median_text(suite)} | {median_text(cw)} | {found} | "
                     f"{smaller} | {seconds:.0f} |")
        print(f"minimal_check {unit.model} s{unit.seed} suite={np.median(suite):.4g} cw={np.median(cw):.4g} "
              f"cw_found={found} cw_smaller={smaller} n={k}", flush=True)
    print(f"\nCW (foolbox {foolbox.__version__}): binary search over c from {args.c:g}, {args.search} rounds of "
          f"{args.steps} Adam steps of {args.lr:g}, no early abort, confidence 0; distances in L2 on [0, 1] pixels, "
          "inf where nothing flipped the decision\n")
    print("\n".join(table))


if __name__ == "__main__":
    main()
