"""The attacks of one (model, seed), scheduled: in the order params names them (those reported alone, then the
ensemble, then the extra attacks), consecutive row attacks as one pool of the row engine, each query attack on what
the attacks before it left robust. Which image each attack broke at each eps, and what it cost; the suite turns that
into records."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from capsbench.attacks import CATALOG, build, worst_case_broken
from capsbench.attacks.base import EngineSettings, QueryAttack, RowAttack, without_unused_heads
from capsbench.attacks.engine import Counts, RowEngine, pool_rows
from capsbench.attacks.schedule import Job
from capsbench.data import as_images
from capsbench.util.progress import Progress, measured

COMPACT_EVERY_GPU = 8  # iterates between the pool's reads on a GPU (on a CPU every iterate: a read is free there)


@dataclass(frozen=True)
class Planned:
    """One attack of a unit: its name, whether it is reported alone (every clean-correct image at every eps) or in the
    ensemble (what the earlier attacks left), and its eps values."""

    name: str
    alone: bool
    eps: list[float]


def planned(params: Any, grid: list[float], blackbox: float | None, *, everyone_alone: bool = False) -> list[Planned]:
    """The unit's attacks in the order they run. A black-box attack runs at the black-box eps only, an ensemble attack
    at the positive eps; with a detector (everyone_alone) every attack sees every image: one that an earlier attack
    broke but the detector flags is not broken for the defended model."""
    out = []
    for name in [*params.attacks, *params.ensemble, *params.extra_attacks]:
        alone = everyone_alone or name in params.attacks
        eps = grid if CATALOG.get(name).white_box else [blackbox]
        out.append(Planned(name, alone, eps if alone else [e for e in eps if e > 0]))
    return out


def engine_settings(params: Any, num_classes: int, device: str, model: torch.nn.Module,
                    sample: torch.Tensor, norm: str = "linf") -> EngineSettings:
    """The engine's settings from params in threat model `norm`: the pool sized by the device where params.batch_size
    is null, reads every iterate on a CPU and every COMPACT_EVERY_GPU iterates on a GPU, speculation on a GPU only
    (unless set)."""
    gpu = str(device).startswith("cuda")
    return EngineSettings(
        num_classes=num_classes,
        seed=params.attack_seed,
        norm=norm,
        batch_size=params.batch_size or pool_rows(model, sample),
        early_exit=params.early_exit,
        precision=params.attack_precision,
        compact_every=params.compact_every or (COMPACT_EVERY_GPU if gpu else 1),
        speculate=gpu if params.speculate is None else bool(params.speculate),
    )


@dataclass
class UnitAttacks:
    """The attacks of one (model, seed) on the test images classified correctly clean (clean_ok, (N,) bool): per
    attack and eps which images it broke (broken) and, where asked, the adversarial images; what each phase cost."""

    model: torch.nn.Module
    images: torch.Tensor  # (N, C, H, W) in [0, 1] on the model's device
    labels: torch.Tensor  # (N,) on the model's device
    clean_ok: np.ndarray  # (N,) bool
    grid: list[float]
    settings: EngineSettings
    args: dict[str, Any]  # params.attack_args
    keep: dict[str, np.ndarray] = field(default_factory=dict)  # attack -> images whose adversarial images to keep
    broken: dict[str, dict[float, np.ndarray]] = field(default_factory=dict)  # (N,) bool per attack and eps
    quietly: dict[str, dict[float, np.ndarray]] = field(default_factory=dict)  # kept out of the worst case
    adversarial: dict[str, dict[float, torch.Tensor]] = field(default_factory=dict)  # (K, ...) per kept image
    skipped: dict[str, str] = field(default_factory=dict)  # attack -> why it does not apply to the model
    seconds: dict[str, float] = field(default_factory=dict)  # per phase ("row_engine" or a query attack)
    rows: dict[str, int] = field(default_factory=dict)  # images x eps > 0 attacked per phase
    counts: Counts = field(default_factory=Counts)

    def why_not(self, name: str, args: dict[str, Any] | None = None) -> str | None:
        """Why attack `name` does not apply to this model (None: it does), probed without the decoder unless the
        attack evades the reconstruction detector (whose decoder is what it probes for)."""
        defended = CATALOG.get(name).defended
        with contextlib.nullcontext() if defended else without_unused_heads(self.model):
            return self._attack(name, args).applies_to(self.model, self.images[:1])

    def minimal(self, name: str, index: torch.Tensor,
                progress: Callable[[int, int, int], None] | None = None) -> torch.Tensor:
        """Minimum-norm attack `name` on the images at `index` (a device tensor): their distances (inf: none found);
        progress(images done, images, images left) after each batch."""
        start = time.perf_counter()
        with without_unused_heads(self.model):
            found = self._attack(name, None).distances(self.model, self.images[index], self.labels[index],
                                                       replace(self.settings, progress=progress))
        self.seconds[name] = time.perf_counter() - start
        return found

    def _attack(self, name: str, args: dict[str, Any] | None) -> Any:
        """Attack `name` with these settings (else the unit's), in the unit's threat model."""
        return build(name, args if args is not None else self.args.get(name)).for_norm(self.settings.norm)

    def run(self, attacks: list[Planned], *, work: Callable[[float, float], None] | None = None,
            overrides: dict[str, dict[str, Any]] | None = None, quiet: bool = False) -> None:
        """Every attack of `attacks`, in order: runs of consecutive row attacks as one pool, each query attack on its
        own. overrides: settings added to some attacks' (the detector's threshold); quiet: the breaks are recorded
        but kept out of the worst case of later phases (the detection-aware attack). work(done, total) follows the
        list in image passes: those done, and those plus the passes still to do (an attack's declared passes until
        it runs; as it runs, a row that early exit ends and an image an earlier attack broke leave the total)."""
        overrides = overrides or {}
        chosen = []
        for a in attacks:
            args = {**(self.args.get(a.name) or {}), **overrides.get(a.name, {})}
            reason = self.why_not(a.name, args)
            if reason is not None:
                self.skipped[a.name] = reason
            else:
                chosen.append((a, self._attack(a.name, args)))
        weights = [len(self.clean_ok) * sum(self._cost(attack, e) for e in a.eps) for a, attack in chosen]
        finished, i = 0.0, 0
        while i < len(chosen):
            j = i + 1
            if isinstance(chosen[i][1], RowAttack):
                while j < len(chosen) and isinstance(chosen[j][1], RowAttack):
                    j += 1
            seen = [0.0]  # the passes this phase has done so far

            def phase(done: float, total: float, before: float = finished, later: float = sum(weights[j:]),
                      seen: list[float] = seen) -> None:
                seen[0] = done
                if work is not None:
                    work(before + done, before + total + later)

            if isinstance(chosen[i][1], RowAttack):
                self._pool(chosen[i:j], phase, sum(weights[i:j]), quiet)
            else:
                self._query(*chosen[i], phase)
            finished += seen[0]
            i = j

    def _cost(self, attack: Any, eps: float) -> float:
        """An attack's declared image passes of one image at `eps` in this unit's threat model."""
        return attack.cost(eps, self.settings.num_classes, self.settings.norm)

    def _pool(self, chosen: list[tuple[Planned, RowAttack]], phase: Callable[[float, float], None], declared: float,
              quiet: bool) -> None:
        """The row attacks `chosen` as one pool; phase(done, total) in image passes: the engine's row-steps, scaled so
        that its first total (before early exit has ended any row) is the attacks' `declared` passes."""
        scale: list[float] = []

        def passes(done: int, total: int, left: int) -> None:
            if not scale:
                scale.append(declared / total if total else 0.0)
            phase(done * scale[0], total * scale[0])

        candidates = self.clean_ok
        jobs = [Job(a.name, attack, a.eps, candidates, a.alone,
                    {e: attack.passes(e, self.settings.num_classes, self.settings.norm) for e in a.eps})
                for a, attack in chosen]
        follow = _work_left(self.settings.compact_every, _both(self.settings.progress, passes))
        engine = RowEngine(self.model, self.images, self.labels, range(len(self.clean_ok)), self.grid,
                           replace(self.settings, progress=follow))
        start = time.perf_counter()
        outcomes = engine.run(jobs, prior_from=None if quiet else self._broken_from(),
                              keep={a.name: self.keep[a.name] for a, _ in chosen if a.name in self.keep})
        self.seconds["row_engine"] = self.seconds.get("row_engine", 0.0) + time.perf_counter() - start
        self.rows["row_engine"] = self.rows.get("row_engine", 0) + sum(
            int(candidates.sum()) * sum(e > 0 for e in a.eps) for a, _ in chosen)
        for field_ in ("iterates", "forwards", "reads", "row_steps"):
            setattr(self.counts, field_, getattr(self.counts, field_) + getattr(engine.counts, field_))
        for (a, _), outcome in zip(chosen, outcomes):
            column = {e: self.grid.index(e) for e in a.eps}
            (self.quietly if quiet else self.broken)[a.name] = {e: outcome.broken[:, j].copy()
                                                                for e, j in column.items()}
            if outcome.adversarial is not None:
                self.adversarial[a.name] = {e: outcome.adversarial[:, j] for e, j in column.items()}

    def _query(self, a: Planned, attack: QueryAttack, phase: Callable[[float, float], None]) -> None:
        """A query attack at each of its eps, on the images every attack so far left robust there (alone: on every
        clean-correct image); phase(done, total) in image passes, each eps declared for every image until the images
        left robust there are known."""
        start = time.perf_counter()
        self.broken[a.name], self.adversarial[a.name] = {}, {}
        worst = worst_case_broken(self.broken, a.eps, len(self.clean_ok))
        done = 0.0
        for k, e in enumerate(a.eps):
            todo = self.clean_ok if a.alone else self.clean_ok & ~worst[e]
            ids = np.nonzero(todo)[0]
            mine, later = self._cost(attack, e) * len(ids), sum(self._cost(attack, x) for x in a.eps[k + 1:])
            later *= len(self.clean_ok)
            phase(done, done + mine + later)
            mask = np.zeros(len(self.clean_ok), dtype=bool)
            adversarial = self.images.clone()
            if len(ids):
                index = torch.from_numpy(ids).to(self.images.device)

                def passes(d: int, t: int, left: int, base: float = done, mine: float = mine,
                           later: float = later) -> None:
                    phase(base + (mine * d / t if t else mine), base + mine + later)

                settings = replace(self.settings, progress=_both(self.settings.progress, passes))
                result = attack.run(self.model, self.images[index], self.labels[index], ids.tolist(), [e], settings)
                mask[ids] = result.broken[e].cpu().numpy()
                adversarial[index] = result.adversarial[e]
            if a.name in self.keep:
                kept = torch.from_numpy(np.asarray(self.keep[a.name], dtype=np.int64)).to(self.images.device)
                self.adversarial[a.name][e] = adversarial[kept]
            self.broken[a.name][e] = mask
            self.rows[a.name] = self.rows.get(a.name, 0) + len(ids) * (e > 0)
            done += mine
        phase(done, done)
        self.seconds[a.name] = time.perf_counter() - start

    def _broken_from(self) -> np.ndarray:
        """(N,) per image the grid index from which some attack so far broke it (len(grid): none)."""
        worst = worst_case_broken(self.broken, self.grid, len(self.clean_ok))
        out = np.full(len(self.clean_ok), len(self.grid))
        for j, e in reversed(list(enumerate(self.grid))):
            out[worst[e]] = j
        return out


def _work_left(every: int, progress: Callable[[int, int, int], None] | None) -> Callable[[int, int, int], None] | None:
    """The row engine's progress as the work it did over that work and the work left: it reports, at each read of
    the pool, the declared row-steps of rows finished or cancelled (whole) and of rows under way, and between two
    reads forwards `every` iterates of the pool's rows. So (row-steps forwarded, forwarded + declared row-steps not
    yet run nor skipped): a row that early exit or a cancel ends credits what it ran, and the rest of its steps leaves
    the total, so the share moves with the time the engine takes (the declared share sat near 90 % after a tenth of
    the quick attacks' time); it only rises, and reaches 1 when no row is left."""
    if progress is None:
        return None
    forwarded, pool = [0], [0]

    def follow(done: int, total: int, rows: int) -> None:
        forwarded[0] += pool[0] * every
        pool[0] = rows
        progress(forwarded[0], forwarded[0] + total - done, rows)

    return follow


def _both(progress: Callable[[int, int, int], None] | None,
          other: Callable[[int, int, int], None]) -> Callable[[int, int, int], None]:
    """A progress callback that calls both (the first may be None)."""

    def follow(done: int, total: int, left: int) -> None:
        if progress is not None:
            progress(done, total, left)
        other(done, total, left)

    return follow


def attack_images(ctx: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The test images (N, C, H, W) in [0, 1] and labels (N,) on the unit's device."""
    return as_images(ctx.splits.test_x, ctx.device), ctx.splits.test_y.to(ctx.device)


def follow_bar(bar: Progress) -> Callable[[int, int, int], None]:
    """Engine progress onto a bar: each phase starts the bar afresh (its own total and clock: the work done goes
    back); within a phase the total may shrink (work that turned out not to be needed)."""

    def follow(done: int, total: int, left: int) -> None:
        if bar.total is None or done < bar.done:
            bar.reset(total)
        bar.add_total(total - bar.total)
        bar.update(done - bar.done)
        bar.show(f"{left:,} rows in the pool")

    return follow


def follow_images(bar: Progress, label: str, share: Callable[[float], None]) -> Callable[[int, int, int], None]:
    """A minimum-norm attack's progress onto `bar`, started afresh for it (its images, its clock, its label), and
    the share of its images done onto `share`."""
    bar.reset(None)
    bar.note(label)

    def follow(done: int, total: int, left: int) -> None:
        bar.add_total(total - (bar.total or 0))
        bar.update(done - bar.done)
        bar.show(f"{left:,} images left")
        share(done / total if total else 1.0)

    return follow


class UnitWork:
    """A unit's measuring as passes done over passes done plus passes still to do, phase by phase (the fixed-eps
    attacks, then each minimum-norm attack): a phase counts its declared passes until it reports its own, whose total
    shrinks as work turns out not to be needed. So a phase whose declared passes are a ceiling (early exit ends most
    rows of the fixed-eps attacks) takes the share it took, not the one it declared; credit(share) gets the share."""

    def __init__(self, declared: dict[str, float], credit: Callable[[float], None]) -> None:
        self.total, self.done, self.credit = dict(declared), dict.fromkeys(declared, 0.0), credit

    def phase(self, name: str) -> Callable[[float, float], None]:
        """What phase `name` reports: (passes done, passes done plus those still to do)."""

        def report(done: float, total: float) -> None:
            self.done[name], self.total[name] = done, total
            whole = sum(self.total.values())
            self.credit(sum(self.done.values()) / whole if whole else 1.0)

        return report


def credit_unit(images: int, passes: float) -> Callable[[float], None]:
    """The unit's measuring credited in its declared passes (the clean pass, then the attacks' share)."""
    measured(images)

    def credit(share: float) -> None:
        measured(images * (1.0 + passes * min(1.0, share)))

    return credit
