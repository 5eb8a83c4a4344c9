"""benchmarks/attack_passes.py measures capsbench's own passes: every candidate name stands for the pass it says (loss,
step rule, steps, target), and a piece breaks what the same pass breaks inside capsbench's attack."""

import importlib.util
from pathlib import Path

import pytest
import torch
from test_attacks import SETTINGS, attack, tiny_model

from capsbench.attacks import decisions
from capsbench.attacks.step_rules import APGDStep, SignStep

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "attack_passes.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("attack_passes", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def loss_of(name: str) -> str:
    """The loss a candidate's name says: fgsm's cross-entropy; apgd_t<k> targeted DLR; raw_t<k> and apgdraw_t<k> the
    targeted margin; apgd_dlr... DLR; else <family>_<loss>."""
    if name == "fgsm":
        return "ce"
    if name.startswith("apgd_t"):
        return "targeted_dlr"
    if name.startswith(("raw_t", "apgdraw_t")):
        return "targeted"
    return "dlr" if name.startswith("apgd_dlr") else name.split("_")[1]


def test_every_candidate_is_the_pass_its_name_says(bench):
    for name in (*bench.CORE, *bench.CAPSULE):
        one = bench.candidate(name, 7, 9, 2.5)
        apgd = name.startswith("apgd")
        assert one.rule == (APGDStep() if apgd else SignStep(1.0 if name == "fgsm" else 2.5)), name
        assert one.steps == (1 if name == "fgsm" else 9 if apgd else 7), name
        assert one.loss == loss_of(name), name
        assert one.target == (int(name[-1]) if "_t" in name else 0), name
        assert one.restart == (1 if "_r1" in name else 0), name
    assert bench.candidate("pgd_margin_3", 7, 9, 2.5).steps == 3
    assert bench.candidate("apgd_t2_25", 7, 9, 2.5).steps == 25


def test_pieces_break_what_capsbenchs_attacks_break(bench):
    """fgsm's piece is capsbench's fgsm; pgd (cross-entropy, then margin on the survivors, each row from its own start)
    breaks exactly the union of the pgd_ce and pgd_margin pieces."""
    model = tiny_model("capsnet")
    images = torch.rand(12, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    labels, ids, counter = decisions(model, images), torch.arange(100, 112), bench.Counter(model)

    def piece(name, eps):
        got = bench.run_piece(bench.candidate(name, 4, 4, 2.5), model, images, labels, ids, eps, SETTINGS, counter)
        assert got["attacked"] == 12 and got["row_steps"] > 0
        return set(got["broken"])

    def broken(name, eps, **args):
        return set(ids[attack(name, model, images, labels, [eps], ids=ids, **args).broken[eps]].tolist())

    assert piece("fgsm", 0.01) == broken("fgsm", 0.01)
    pgd = broken("pgd", 0.003, steps=4)
    assert 0 < len(pgd) < len(ids), "the known answer needs both outcomes"
    assert pgd == piece("pgd_ce", 0.003) | piece("pgd_margin", 0.003)
