"""`square`: Andriushchenko et al., "Square Attack: a query-efficient black-box adversarial attack via random search"
(arXiv:1912.00049): the black-box attack of the ensemble, a gradient-masking check that must break nothing the
white-box attacks leave. It runs as rows of the engine (capsbench.attacks.step_rules.RandomSquare); torchattacks'
Square is its held-out check (benchmarks/square_check.py)."""

from __future__ import annotations

from capsbench.attacks.base import Pass, RowAttack
from capsbench.attacks.objectives import Objective
from capsbench.attacks.step_rules import RandomSquare


class Square(RowAttack):
    """`queries` queries after the first (its stripes), the margin loss on the model's attack logits, one restart,
    p_init 0.8 (the authors' L-inf setting)."""

    name = "square"
    attacks = "the model's attack logits through queries only (no gradients)"
    LABEL = "Square"
    ORDER = 80
    WHITE_BOX = False
    ARGUMENT_RANGES = {"queries": "int [1, inf)", "p_init": "(0, 1]"}

    def __init__(self, *, queries: int = 1000, p_init: float = 0.8) -> None:
        self.queries, self.p_init = queries, p_init

    def budget(self, num_classes: int) -> str:
        return f"{self.queries} queries, margin loss, 1 restart, p_init {self.p_init:g}"

    def passes(self, eps: float, num_classes: int) -> list[Pass]:
        return [Pass(Objective(), "margin", RandomSquare(self.p_init, self.queries), self.queries, tag="square/")]
