"""`square`: Andriushchenko et al., "Square Attack: a query-efficient black-box adversarial attack via random search"
(arXiv:1912.00049): the black-box attack of the ensemble, a gradient-masking check that must break nothing the
white-box attacks leave. In L-inf it runs as rows of the engine (capsbench.attacks.step_rules.RandomSquare), its draws
per image; torchattacks' Square is its held-out check (benchmarks/square_check.py). In L2 it is torchattacks' own."""

from __future__ import annotations

import torchattacks

from capsbench.attacks.base import Attack, Pass, RowAttack
from capsbench.attacks.objectives import Objective
from capsbench.attacks.step_rules import RandomSquare
from capsbench.attacks.torchattacks_adapters import LibraryAttack


class Square(RowAttack):
    """`queries` queries after the first (its stripes, in L-inf), the margin loss on the model's attack logits, one
    restart, p_init 0.8 (the authors' setting)."""

    name = "square"
    attacks = "the model's attack logits through queries only (no gradients)"
    LABEL = "Square"
    ORDER = 80
    NORMS = ("linf", "l2")
    WHITE_BOX = False
    ARGUMENT_RANGES = {"queries": "int [1, inf)", "p_init": "(0, 1]"}

    def __init__(self, *, queries: int = 1000, p_init: float = 0.8) -> None:
        self.queries, self.p_init = queries, p_init

    def budget(self, num_classes: int) -> str:
        return f"{self.queries} queries, margin loss, 1 restart, p_init {self.p_init:g}"

    def passes(self, eps: float, num_classes: int, norm: str = "linf") -> list[Pass]:
        return [Pass(Objective(), "margin", RandomSquare(self.p_init, self.queries), self.queries, tag="square/")]

    def for_norm(self, norm: str) -> Attack:
        return SquareL2(self.queries, self.p_init) if norm == "l2" else self


class SquareL2(LibraryAttack):
    """Square in L2 as torchattacks runs it (its windows of decaying mass, its own random numbers per batch)."""

    name = "square"
    attacks = Square.attacks
    WHITE_BOX = False

    def __init__(self, queries: int, p_init: float) -> None:
        self.queries, self.p_init = queries, p_init

    def budget(self, num_classes: int) -> str:
        return f"{self.queries} queries, margin loss, 1 restart, p_init {self.p_init:g} (torchattacks, L2)"

    def cost(self, eps: float, num_classes: int, norm: str = "l2") -> float:
        return float(self.queries + 1)

    def build(self, target, eps, settings):
        return torchattacks.Square(target, norm="L2", eps=eps, n_queries=self.queries, n_restarts=1, p_init=self.p_init,
                                   loss="margin", seed=settings.seed)
