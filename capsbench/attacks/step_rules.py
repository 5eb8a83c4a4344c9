"""How a row of the engine moves from its iterate x(t), given the loss f and its gradient g there: the sign step of
PGD and FGSM, and APGD's step-size control with momentum. A rule declares the per-row state it keeps; the engine
holds that state for every row of the pool and calls the rule on contiguous slices of rows that share it, on the
device, with no read back to the host.

APGD: Croce and Hein, "Reliable evaluation of adversarial robustness with an ensemble of diverse parameter-free
attacks" (arXiv:2003.01690, sec. 3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

MOMENTUM = 0.75  # alpha: x(k+1) = x(k) + alpha (z(k+1) - x(k)) + (1 - alpha) (x(k) - x(k-1))
RHO = 0.75  # condition 1: the step halves when fewer than rho of the steps since the last checkpoint raised the loss


def project(x: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor) -> torch.Tensor:
    """x clipped into the box [lower, upper] (the L-inf eps-ball intersected with [0, 1])."""
    return torch.min(torch.max(x, lower), upper)


def project_l2(x: torch.Tensor, clean: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
    """x moved into the L2 ball of radius eps (B,) around `clean` (its offset scaled down where longer), then into
    [0, 1], as AutoAttack's L2 attacks project."""
    offset = x - clean
    length = offset.flatten(1).norm(dim=1).clamp(min=1e-12)
    return (clean + offset * per_row((eps / length).clamp(max=1.0), x)).clamp(0.0, 1.0)


def unit_l2(g: torch.Tensor) -> torch.Tensor:
    """g over its L2 norm per row (0 where g is 0): the steepest ascent direction in L2."""
    return g / per_row(g.flatten(1).norm(dim=1).clamp(min=1e-12), g)


def per_row(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """(B,) -> (B, 1, 1, ...) broadcastable against `like` (B, ...)."""
    return v.view((-1,) + (1,) * (like.dim() - 1))


@dataclass(frozen=True)
class StepRule:
    """Base class. `state` names the per-row state a rule keeps: "image" (shaped like the rows' images) or a dtype
    ("float", "long", "bool"); `start` fills it for rows entering the pool, `advance` returns x(t+1). Every rule also
    reads the engine's own state: x, t, eps, clean, lower, upper (the eps-box in L-inf, [0, 1] in L2), key (31 random
    bits fixed by the row's seed, pass and image id), schedule (the row's step count's row of mark_table) and
    mark_table (mark_table below)."""

    state: ClassVar[dict[str, str]] = {}
    needs_gradient: ClassVar[bool] = True  # False: a query rule, whose rows are forwarded without autograd
    norm: ClassVar[str] = "linf"  # the threat model its rows stay in: "linf" (lower, upper the eps-box) or "l2"

    def start_point(self, clean: torch.Tensor, eps: torch.Tensor, noise: torch.Tensor, lower: torch.Tensor,
                    upper: torch.Tensor) -> torch.Tensor:
        """x(0) of rows with a random start: the clean images (n, ...) moved by noise (n, ...) in [-1, 1] x eps (in
        L2: to the sphere of radius eps in the noise's direction, as AutoAttack's L2 starts)."""
        if self.norm == "l2":
            return project_l2(clean + unit_l2(noise) * per_row(eps, clean), clean, eps)
        return project(clean + noise * per_row(eps, clean), lower, upper)

    def start(self, s: dict[str, torch.Tensor], eps: torch.Tensor, steps: torch.Tensor) -> None:
        """Fill this rule's state in `s` (views of the new rows) for rows at eps (n,) running `steps` (n,)."""

    def advance(self, s: dict[str, torch.Tensor], f: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        """x(t+1) (B, ...) of rows whose state `s` holds x (their iterate x(t)), t, lower, upper and the rule's own,
        given f (B,) and g (B, ...) at x(t)."""
        raise NotImplementedError


@dataclass(frozen=True)
class L2Step(StepRule):
    """PGD's step in L2: x(t+1) = P(x(t) + step g / |g|), step = ratio * eps / steps (FGM: one step of eps), P the
    projection onto the L2 ball and [0, 1]."""

    ratio: float
    norm: ClassVar[str] = "l2"
    state: ClassVar[dict[str, str]] = {"step_size": "float"}

    def start(self, s: dict[str, torch.Tensor], eps: torch.Tensor, steps: torch.Tensor) -> None:
        s["step_size"].copy_(self.ratio * eps / steps)

    def advance(self, s: dict[str, torch.Tensor], f: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return project_l2(s["x"] + per_row(s["step_size"], g) * unit_l2(g), s["clean"], s["eps"])


@dataclass(frozen=True)
class SignStep(StepRule):
    """PGD's step (Madry et al., arXiv:1706.06083): x(t+1) = P(x(t) + step sign(g)), step = ratio * eps / steps
    (FGSM: one step of eps, ratio 1)."""

    ratio: float
    state: ClassVar[dict[str, str]] = {"step_size": "float"}

    def start(self, s: dict[str, torch.Tensor], eps: torch.Tensor, steps: torch.Tensor) -> None:
        s["step_size"].copy_(self.ratio * eps / steps)

    def advance(self, s: dict[str, torch.Tensor], f: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        return project(s["x"] + per_row(s["step_size"], g) * g.sign(), s["lower"], s["upper"])


def gradient_step(norm: str, ratio: float) -> StepRule:
    """PGD's step rule in `norm`: sign steps in L-inf, normalised-gradient steps in L2."""
    return L2Step(ratio) if norm == "l2" else SignStep(ratio)


def checkpoints(steps: int) -> list[int]:
    """The iterations w_j = ceil(p_j * steps) < steps at which APGD's step size may halve: p_0 = 0, p_1 = 0.22,
    p_{j+1} = p_j + max(p_j - p_{j-1} - 0.03, 0.06) (sec. 3.2). For 100 steps: 22, 41, 57, 70, 80, 87, 93, 99."""
    marks, before, p = [], 0.0, 0.22
    while (mark := math.ceil(round(p * steps, 6))) < steps:
        if not marks or mark > marks[-1]:
            marks.append(mark)
        before, p = p, round(p + max(p - before - 0.03, 0.06), 6)
    return marks


@dataclass(frozen=True)
class APGDStep(StepRule):
    """APGD's step: eta starts at 2 eps; z = P(x(t) + eta sign(g)), x(t+1) = P(x(t) + alpha (z - x(t)) + (1 - alpha)
    (x(t) - x(t-1))), alpha = 1 on the first step and MOMENTUM after. At each checkpoint w_j a row's eta halves, and
    the row goes on from its best point and that point's gradient, when (1) fewer than rho (w_j - w_{j-1}) of its
    steps since w_{j-1} raised the loss, or (2) its eta did not halve at w_{j-1} and its best loss has not risen since
    (sec. 3.2; as the authors' code, (2) is not checked at the first checkpoint). In L2 (`l2`) the step follows
    g / |g| and P projects onto the L2 ball and [0, 1] (sec. 3 and the authors' APGD-L2)."""

    l2: bool = False
    state: ClassVar[dict[str, str]] = {
        "before": "image", "x_best": "image", "grad_best": "image",
        "eta": "float", "value": "float", "best": "float", "best_at_mark": "float",
        "rises": "long", "halved_at_mark": "bool", "last_mark": "long",
    }

    def start(self, s: dict[str, torch.Tensor], eps: torch.Tensor, steps: torch.Tensor) -> None:
        s["before"].copy_(s["x"])
        s["x_best"].copy_(s["x"])
        s["grad_best"].zero_()
        s["eta"].copy_(2.0 * eps)
        for name in ("value", "best", "best_at_mark"):
            s[name].fill_(-math.inf)
        s["rises"].zero_()
        s["halved_at_mark"].fill_(True)
        s["last_mark"].zero_()

    def advance(self, s: dict[str, torch.Tensor], f: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        x, t = s["x"], s["t"]
        f = f.detach().float()
        s["rises"].add_((f > s["value"]).long())
        s["value"].copy_(f)
        better = f > s["best"]
        s["best"].copy_(torch.where(better, f, s["best"]))
        s["x_best"].copy_(torch.where(per_row(better, x), x, s["x_best"]))
        s["grad_best"].copy_(torch.where(per_row(better, g), g, s["grad_best"]))
        at_mark = s["mark_table"][s["schedule"], t]  # (B,) whether iterate t is one of the row's checkpoints
        oscillating = s["rises"] < RHO * (t - s["last_mark"])  # condition 1
        stalled = at_mark & (oscillating | (~s["halved_at_mark"] & (s["best"] <= s["best_at_mark"])))  # or (2)
        s["eta"].copy_(torch.where(stalled, s["eta"] / 2.0, s["eta"]))
        s["value"].copy_(torch.where(stalled, s["best"], s["value"]))
        s["halved_at_mark"].copy_(torch.where(at_mark, stalled, s["halved_at_mark"]))
        s["best_at_mark"].copy_(torch.where(at_mark, s["best"], s["best_at_mark"]))
        s["rises"].copy_(torch.where(at_mark, torch.zeros_like(s["rises"]), s["rises"]))
        s["last_mark"].copy_(torch.where(at_mark, t, s["last_mark"]))
        here = torch.where(per_row(stalled, x), s["x_best"], x)
        grad = torch.where(per_row(stalled, g), s["grad_best"], g)
        alpha = per_row(torch.where(t == 0, 1.0, MOMENTUM), x)
        if self.l2:
            z = project_l2(here + per_row(s["eta"], grad) * unit_l2(grad), s["clean"], s["eps"])
        else:
            z = project(here + per_row(s["eta"], grad) * grad.sign(), s["lower"], s["upper"])
        moved = here + alpha * (z - here) + (1.0 - alpha) * (here - s["before"])
        s["before"].copy_(here)
        return project_l2(moved, s["clean"], s["eps"]) if self.l2 else project(moved, s["lower"], s["upper"])

    @property
    def norm(self) -> str:  # type: ignore[override]
        return "l2" if self.l2 else "linf"


SQUARE_SCHEDULE = ((10, 2), (50, 4), (200, 8), (500, 16), (1000, 32), (2000, 64), (4000, 128), (6000, 256),
                   (8000, 512))  # (iteration of 10,000, p_init over p past it): Square's budget rescaled to 10,000


@dataclass(frozen=True)
class RandomSquare(StepRule):
    """Square Attack's random search in L-inf (Andriushchenko et al., arXiv:1912.00049, alg. 1 and sec. 3.1, as the
    authors' code and torchattacks run it): x(0) is the clean image moved by +-eps in vertical stripes; each later
    iterate moves the best point so far by +-2 eps (a sign per channel) in one square window of side
    s = round(sqrt(p n / c)), clipped to the eps-box, and becomes the best point when it lowers the margin (or is
    misclassified); p starts at p_init and halves on the schedule above, rescaled to the run's queries. Its random
    numbers are drawn per row and iterate from the row's key (seed, pass, image id), so a row's outcome never depends
    on the rows beside it: the window's place is drawn per image (the authors' code draws one place per iteration for
    a whole batch, a shortcut that ties an image's search to its batch). No gradient."""

    p_init: float = 0.8
    queries: int = 1000
    needs_gradient: ClassVar[bool] = False
    state: ClassVar[dict[str, str]] = {"x_best": "image", "best": "float"}

    def start_point(self, clean: torch.Tensor, eps: torch.Tensor, noise: torch.Tensor, lower: torch.Tensor,
                    upper: torch.Tensor) -> torch.Tensor:
        stripes = noise[:, :, :1, :].sign()  # (n, C, 1, W): one sign per channel and column
        stripes = torch.where(stripes == 0, torch.ones_like(stripes), stripes)
        return project(clean + stripes * per_row(eps, clean), lower, upper)

    def start(self, s: dict[str, torch.Tensor], eps: torch.Tensor, steps: torch.Tensor) -> None:
        s["x_best"].copy_(s["x"])
        s["best"].fill_(-math.inf)

    def advance(self, s: dict[str, torch.Tensor], f: torch.Tensor, g: torch.Tensor | None) -> torch.Tensor:
        x, t = s["x"], s["t"]
        f = f.detach().float()
        better = (f > s["best"]) | (f >= 0)  # a lower margin, or misclassified (the margin loss is -margin)
        s["best"].copy_(torch.where(better, f, s["best"]))
        s["x_best"].copy_(torch.where(per_row(better, x), x, s["x_best"]))
        b, c, h, w = x.shape
        p = self.p_init / self._divisor(t)  # (B,) the proposal made now is the run's iteration t
        side = (p * h * w).sqrt().round().clamp(min=1, max=min(h, w)).long()  # (B,) n / c = h w
        top = (uniform(s["key"], t, 0) * (h - side)).long()  # [0, h - side): as the authors' randint
        left = (uniform(s["key"], t, 1) * (w - side)).long()
        rows, cols = torch.arange(h, device=x.device), torch.arange(w, device=x.device)
        inside = ((rows[None] >= top[:, None]) & (rows[None] < (top + side)[:, None]))[:, :, None] \
            & ((cols[None] >= left[:, None]) & (cols[None] < (left + side)[:, None]))[:, None, :]  # (B, H, W)
        signs = torch.stack([uniform(s["key"], t, 2 + k) for k in range(c)], dim=1) < 0.5  # (B, C)
        step = torch.where(signs, 1.0, -1.0)[:, :, None, None] * 2.0 * per_row(s["eps"], x)
        return project(s["x_best"] + inside[:, None] * step, s["lower"], s["upper"])

    def _divisor(self, t: torch.Tensor) -> torch.Tensor:
        """(B,) how many times p has halved by iteration t of `queries` (the schedule on 10,000 iterations)."""
        at = (t.double() / self.queries * 10000).floor()
        divisor = torch.ones_like(at)
        for after, by in SQUARE_SCHEDULE:
            divisor = torch.where(at > after, float(by), divisor)
        return divisor.float()


M31 = (1 << 31) - 1


def _mix(z: torch.Tensor) -> torch.Tensor:
    """A 31-bit integer hash (the xor-shift-multiply rounds of hash32, kept below 2^31 so no product overflows)."""
    z = ((z ^ (z >> 16)) * 0x45D9F3B) & M31
    z = ((z ^ (z >> 16)) * 0x45D9F3B) & M31
    return z ^ (z >> 16)


def uniform(key: torch.Tensor, t: torch.Tensor, k: int) -> torch.Tensor:
    """(B,) uniform numbers in [0, 1) for rows of `key` (B,) at iterates t (B,), the k-th of each: a counter-based
    draw, the same wherever and beside whatever a row runs."""
    z = _mix((key + _mix((t * 64 + k) & M31)) & M31)
    return z.double() / float(M31 + 1)


def mark_table(steps: list[int], device: torch.device) -> torch.Tensor:
    """(len(steps), max(steps) + 1) bool: row m says which iterates are checkpoints of a run of steps[m] steps."""
    table = torch.zeros(len(steps), max(steps, default=0) + 1, dtype=torch.bool)
    for m, n in enumerate(steps):
        table[m, checkpoints(n)] = True
    return table.to(device)


def state_fields(rules: list[StepRule]) -> dict[str, Any]:
    """The per-row state every rule of `rules` keeps, by name."""
    out: dict[str, Any] = {}
    for rule in rules:
        out.update(rule.state)
    return out
