"""The row engine: every row attack of a unit runs as rows (image x eps x pass) of one pool on the device. Each
iterate forwards the pool's rows (one model call per kind of forward pass), takes the gradient of each row's loss,
judges each row by the model's decision and moves it by its step rule, with no read back to the host; every
`compact_every` iterates one read tells which rows finished, and the schedule (capsbench.attacks.schedule) lets new
rows in. Random starts are drawn per (seed, pass, image id), so a row's outcome never depends on which rows share
its batch."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from capsbench.attacks.base import (
    Attack,
    AttackResult,
    EngineSettings,
    Pass,
    QueryAttack,
    decisions,
    start_noise,
    without_unused_heads,
)
from capsbench.attacks.losses import TARGETED, loss_values
from capsbench.attacks.objectives import FORWARDS, REJECTED, Objective
from capsbench.attacks.schedule import Job, Rows, Schedule
from capsbench.attacks.step_rules import StepRule, mark_table, per_row, state_fields
from capsbench.models import Classifier
from capsbench.util.precision import autocast

# rows in a CPU's pool: there the work is the cost, and a CapsNet row costs more in a larger batch (forward and
# backward 0.37 ms a row at 50 rows, 0.51 at 200, 0.54 at 500 on 2 cores): at 128 the quick CapsNet's attacks on 200
# test images took 37.5-39.9 s against 43.2-46.3 s at 500 and 37.2-39.9 s for the eps-by-eps loops before the pool
CPU_ROWS = 128
MAX_ROWS = 65536  # at most this many rows in a GPU's pool
GPU_MEMORY_SHARE = 0.5  # of the free memory a GPU's pool may take
CORE = {"x": "image", "adversarial": "image", "clean": "image", "lower": "image", "upper": "image", "label": "long",
        "target": "long",
        "eps": "float", "t": "long", "steps": "long", "schedule": "long", "key": "long", "broken": "bool",
        "done": "bool"}
DTYPES = {"float": torch.float32, "long": torch.int64, "bool": torch.bool}


@dataclass
class JobOutcome:
    """What one job found: broken (N, J) over the unit's eps grid, and for the images kept, the adversarial images
    (K, J, ...) in the order of the indices asked for: the first iterate that broke an image, else the last pass's last
    iterate (an image the job never attacked: the clean one)."""

    broken: np.ndarray
    adversarial: torch.Tensor | None = None


@dataclass
class Counts:
    """What the engine did: iterates, model forward calls, reads back to the host, row-steps forwarded."""

    iterates: int = 0
    forwards: int = 0
    reads: int = 0
    row_steps: int = 0


@dataclass
class _Group:
    """Rows of the pool, contiguous, that share a forward pass, an objective, a loss and a step rule."""

    objective: Objective
    loss: str
    rule: StepRule
    start: int
    end: int
    final: bool = False  # every row is at its last iterate: judged, never moved, so forwarded without autograd

    @property
    def kind(self) -> tuple[str, bool]:
        """(forward pass, whether it needs the input gradient): rows of one kind share a model call."""
        return self.objective.forward, self.rule.needs_gradient and not self.final


@dataclass
class _Pool:
    """The rows in flight: their state on the device (one tensor per field, rows in group order) and on the host."""

    rows: Rows
    state: dict[str, torch.Tensor]
    groups: list[_Group] = field(default_factory=list)

    def segments(self) -> Iterator[tuple[str, int, int, list[_Group]]]:
        """(forward, start, end, groups) of each run of groups sharing a forward pass."""
        i = 0
        while i < len(self.groups):
            kind = self.groups[i].kind
            j = i
            while j < len(self.groups) and self.groups[j].kind == kind:
                j += 1
            yield kind[0], self.groups[i].start, self.groups[j - 1].end, self.groups[i:j]
            i = j


class RowEngine:
    """Runs the jobs of one unit on `model` over test images (N, C, H, W) in [0, 1] on the model's device, their
    labels (N,) there and ids (N,) (their test-set indices, for the random starts), on the eps `grid`."""

    def __init__(self, model: Classifier, images: torch.Tensor, labels: torch.Tensor, ids: Sequence[int],
                 grid: list[float], settings: EngineSettings) -> None:
        self.model, self.images, self.labels, self.ids = model, images, labels, list(ids)
        self.grid, self.settings, self.device = grid, settings, images.device
        self.counts = Counts()
        self._noise: dict[tuple[str, int], torch.Tensor] = {}

    def run(self, jobs: list[Job], *, prior_from: np.ndarray | None = None,
            keep: dict[str, np.ndarray] | None = None) -> list[JobOutcome]:
        """Every row of `jobs` to its end; prior_from (N,): the eps index from which an earlier phase broke each
        image (its ensemble rows there and above never run); keep: per job name, the images (indices) whose
        adversarial images to return."""
        s = self.settings
        schedule = Schedule(jobs, self.grid, len(self.images), speculate=s.speculate, prior_from=prior_from)
        passes = [p for job in jobs for e in job.eps for p in job.passes[e]]
        self._rules = list(dict.fromkeys(p.rule for p in passes))
        self._steps = sorted({p.steps for p in passes})
        self._marks = mark_table(self._steps, self.device)
        self._grid = torch.tensor(self.grid, dtype=torch.float32).to(self.device)
        kept = self._kept(jobs, keep or {})
        pool = _Pool(Rows.concat([]), self._empty(0))
        total, progress = schedule.declared(), s.progress
        with ExitStack() as stack:
            stack.enter_context(_evaluating(self.model))
            if not any(p.objective.needs_reconstructions for p in passes):
                stack.enter_context(without_unused_heads(self.model))
            self._rankings = self._rank({p.objective for p in passes if p.loss in TARGETED})
            while True:
                pool = self._compact(pool, schedule, kept)
                if progress is not None:
                    progress(min(total, schedule.settled() + self._underway), total, len(pool.rows))
                if not len(pool.rows):
                    break
                for _ in range(s.compact_every):
                    self._iterate(pool)
        return [JobOutcome(schedule.broken(a), None if kept[a] is None else _first_break_else_last(
            kept[a], schedule.broken(a))) for a in range(len(jobs))]

    # --- the pool ------------------------------------------------------------------------------------------------
    def _compact(self, pool: _Pool, schedule: Schedule, kept: list[dict[str, Any] | None]) -> _Pool:
        """The one read of an iterate window: rows that finished leave (their outcomes go to the schedule), rows the
        schedule cancelled are dropped, and new rows fill the room."""
        self._underway = 0
        keep, t = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        if len(pool.rows):
            done, broken, t = self._read(pool)
            if self.settings.precision != "fp32":
                broken = self._confirm_in_fp32(pool, done, broken)
            finished = np.nonzero(done)[0]
            self._keep(pool, finished, broken, kept)
            schedule.finish(pool.rows.take(finished), broken[finished])
            keep = np.nonzero(~done & schedule.running(pool.rows))[0]
            self._underway = int(t[keep].sum())  # each running row has been forwarded t times
        new = schedule.admit(self.settings.batch_size - len(keep))
        if len(keep) == len(pool.rows) and not len(new):
            return pool  # nothing left and nothing entered: the pool as it was
        return self._pack(pool, keep, t[keep], new, schedule)

    def _read(self, pool: _Pool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(done, broken, t) of every row in the pool, in one copy to the host."""
        st = pool.state
        packed = np.array(torch.stack([st["done"].long(), st["broken"].long(), st["t"]]).tolist(), dtype=np.int64)
        self.counts.reads += 1
        return packed[0].astype(bool), packed[1].astype(bool), packed[2]

    @torch.no_grad()
    def _confirm_in_fp32(self, pool: _Pool, done: np.ndarray, broken: np.ndarray) -> np.ndarray:
        """Under bf16: whether the fp32 model (defended, where the objective is) gets each finished row's adversarial
        image wrong (its first bf16-breaking iterate, else its last); unfinished rows keep their bf16 flag."""
        out = broken.copy()
        for g in pool.groups:
            rows = np.nonzero(done[g.start:g.end])[0] + g.start
            if not len(rows):
                continue
            index = torch.from_numpy(rows).to(self.device)
            st = pool.state
            adversarial = torch.where(per_row(st["broken"][index], st["x"][index]), st["adversarial"][index],
                                      st["x"][index])
            with torch.autocast(self.device.type, enabled=False):
                decided = self._decide(g.objective, adversarial)
            wrong = (decided != st["label"][index]) & (decided != REJECTED)
            out[rows] = wrong.cpu().numpy()
            st["broken"][index] = wrong
            st["adversarial"][index] = adversarial
            self.counts.reads += 1
        return out

    def _decide(self, objective: Objective, x: torch.Tensor) -> torch.Tensor:
        self.counts.forwards += 1
        out = FORWARDS[objective.forward](self.model, x)
        decided = objective.decided(out, x)
        if decided is None:
            self.counts.forwards += 1
            decided = decisions(self.model, x)
        return decided

    def _pack(self, pool: _Pool, keep: np.ndarray, t: np.ndarray, new: Rows, schedule: Schedule) -> _Pool:
        """The pool of the kept rows (at iterates t) and the new ones, sorted into groups (forward pass, objective,
        loss, rule, and whether the rows are at their last iterate, known here when the pool is read every
        iterate)."""
        arriving = schedule.passes(new)
        by_rule = sorted(range(len(new)), key=lambda r: (repr(arriving[r].rule), not arriving[r].random_start, r))
        new = new.take(np.array(by_rule, dtype=np.int64))
        rows = Rows.concat([pool.rows.take(keep), new])
        passes = schedule.passes(rows)
        at = np.concatenate([t, np.zeros(len(new), dtype=np.int64)])
        final = [self.settings.compact_every == 1 and int(at[r]) >= p.steps for r, p in enumerate(passes)]
        keys = [(p.objective.forward, p.rule.needs_gradient and not final[r], repr(p.objective), p.loss, repr(p.rule))
                for r, p in enumerate(passes)]
        order = np.array(sorted(range(len(rows)), key=lambda r: (keys[r], r)), dtype=np.int64)
        fresh = self._fresh(new, passes[len(keep):])
        moved = self._device(np.concatenate([keep, order]))  # one copy to the device for both
        state = {name: torch.cat([pool.state[name][moved[:len(keep)]], fresh[name]])[moved[len(keep):]]
                 for name in fresh}
        rows = rows.take(order)
        groups: list[_Group] = []
        for position, r in enumerate(order):
            p = passes[r]
            if groups and (groups[-1].objective, groups[-1].loss, groups[-1].rule) == (p.objective, p.loss, p.rule) \
                    and keys[order[position - 1]] == keys[r]:
                groups[-1].end += 1
            else:
                groups.append(_Group(p.objective, p.loss, p.rule, position, position + 1, final[r]))
        return _Pool(rows, state, groups)

    def _device(self, array: np.ndarray) -> torch.Tensor:
        """A host array on the device, copied without making the host wait (pinned memory, non-blocking)."""
        tensor = torch.from_numpy(np.ascontiguousarray(array))
        if self.device.type != "cuda":
            return tensor
        return tensor.pin_memory().to(self.device, non_blocking=True)

    def _empty(self, n: int) -> dict[str, torch.Tensor]:
        shape = tuple(self.images.shape[1:])
        fields = {**CORE, **state_fields(getattr(self, "_rules", []))}
        return {name: torch.zeros((n, *shape) if kind == "image" else (n,), device=self.device,
                                  dtype=torch.float32 if kind == "image" else DTYPES[kind])
                for name, kind in fields.items()}

    def _fresh(self, new: Rows, passes: list[Pass]) -> dict[str, torch.Tensor]:
        """The state of rows entering the pool (each rule's rows contiguous, random starts first): x(0) (the clean
        image, or its rule's start point from a random draw), the eps-box, label, target, steps, key and each step
        rule's own state; two copies to the device, one of numbers and one of random draws."""
        s = self._empty(len(new))
        if not len(new):
            return s
        ranked = list(self._rankings)
        numbers = np.array([
            new.image, new.eps, [p.steps for p in passes], [self._steps.index(p.steps) for p in passes],
            [row_key(self.settings.seed, p.stream, self.ids[i]) for p, i in zip(passes, new.image.tolist())],
            [p.target - 1 if p.loss in TARGETED else 0 for p in passes],
            [ranked.index(p.objective) if p.loss in TARGETED else -1 for p in passes],
        ], dtype=np.int64)
        image, eps_index, steps, schedule, key, rank, ranking = self._device(numbers)
        starting = [r for r, p in enumerate(passes) if p.random_start]
        noise = self._device(torch.stack([self._start(passes[r], int(new.image[r])) for r in starting]).numpy()) \
            if starting else None
        clean = self.images[image]
        eps = self._grid[eps_index]
        s["lower"] = (clean - per_row(eps, clean)).clamp(min=0.0)
        s["upper"] = (clean + per_row(eps, clean)).clamp(max=1.0)
        s["x"] = clean.clone()
        s.update(key=key, label=self.labels[image], eps=eps, steps=steps, schedule=schedule)
        for o, objective in enumerate(ranked):
            chosen = self._rankings[objective][image, rank]
            s["target"] = torch.where(ranking == o, chosen, s["target"])
        drawn = 0
        s["clean"] = clean
        for rule, start, end in _blocks([p.rule for p in passes]):
            block = slice(start, end)
            if rule.norm == "l2":  # the box is [0, 1]: the rule projects onto the L2 ball itself
                s["lower"][block], s["upper"][block] = 0.0, 1.0
            random = sum(passes[r].random_start for r in range(start, end))  # they come first in the block
            if random:
                at = slice(start, start + random)
                s["x"][at] = rule.start_point(clean[at], eps[at], noise[drawn:drawn + random], s["lower"][at],
                                              s["upper"][at])
                drawn += random
            rule.start({name: value[block] for name, value in s.items()}, eps[block], steps[block].float())
        s["adversarial"] = s["x"].clone()
        return s

    def _start(self, p: Pass, image: int) -> torch.Tensor:
        """The random draw (C, H, W) in [-1, 1] of a pass's stream for one image, on the host, drawn once per image
        and stream."""
        key = (p.stream, image)
        if key not in self._noise:
            self._noise[key] = start_noise([self.ids[image]], tuple(self.images.shape[1:]),
                                           seed=self.settings.seed, stream=p.stream, device="cpu")[0]
        return self._noise[key]

    @torch.no_grad()
    def _rank(self, objectives: set[Objective]) -> dict[Objective, torch.Tensor]:
        """Per objective of a targeted pass: (N, C - 1) the other classes of each clean image, likeliest first by
        the objective's logits (a multi-targeted pass tries the likeliest wrong classes first)."""
        out = {}
        for objective in objectives:
            parts = []
            for start in range(0, len(self.images), self.settings.batch_size):
                x = self.images[start:start + self.settings.batch_size]
                self.counts.forwards += 1
                logits = objective.logits(FORWARDS[objective.forward](self.model, x), x).float()
                labels = self.labels[start:start + self.settings.batch_size]
                others = logits.scatter(1, labels[:, None], float("-inf"))
                parts.append(others.argsort(dim=1, descending=True)[:, :-1])
            out[objective] = torch.cat(parts)
        return out

    # --- one iterate -----------------------------------------------------------------------------------------------
    def _iterate(self, pool: _Pool) -> None:
        """Judge every row at its iterate x(t) and move the rows still running to x(t+1)."""
        st, early = pool.state, self.settings.early_exit
        self.counts.iterates += 1
        for forward, start, end, groups in pool.segments():
            gradient = groups[0].kind[1]
            xs = st["x"][start:end].detach().requires_grad_(gradient)
            with torch.set_grad_enabled(gradient), autocast(self.device.type, self.settings.precision):
                self.counts.forwards += 1
                out = FORWARDS[forward](self.model, xs)
                losses, decided = [], []
                for g in groups:
                    part, x = _rows(out, g.start - start, g.end - start), xs[g.start - start:g.end - start]
                    f = loss_values(g.loss, g.objective.logits(part, x), st["label"][g.start:g.end],
                                    st["target"][g.start:g.end])
                    penalty = g.objective.penalty(part, x)
                    losses.append(f if penalty is None else f - penalty)
                    decided.append(g.objective.decided(part, x))
                total = sum(f.float().sum() for f in losses)
            grad = torch.autograd.grad(total, xs)[0] if gradient else None
            here = xs.detach()
            if any(d is None for d in decided):  # a surrogate: the real model decides
                self.counts.forwards += 1
                with autocast(self.device.type, self.settings.precision):
                    real = decisions(self.model, here)
                decided = [real[g.start - start:g.end - start] if d is None else d for g, d in zip(groups, decided)]
            live = slice(start, end)
            newly = (torch.cat(decided) != st["label"][live]) & (torch.cat(decided) != REJECTED) \
                & ~st["broken"][live] & ~st["done"][live]
            st["broken"][live] |= newly
            st["adversarial"][live] = torch.where(per_row(newly, here), here, st["adversarial"][live])
            leaving = (st["broken"][live] | (st["eps"][live] == 0)) if early else torch.zeros_like(newly)
            st["done"][live] |= leaving | (st["t"][live] >= st["steps"][live])
            for g, f in zip(groups, losses):
                if g.final:
                    continue  # each row finished at this iterate (t = steps): nothing moves
                rows = slice(g.start, g.end)
                view = {name: value[rows] for name, value in st.items()}
                view["mark_table"] = self._marks
                moved = g.rule.advance(view, f, None if grad is None else grad[g.start - start:g.end - start])
                finished = per_row(st["done"][rows], moved)
                st["x"][rows] = torch.where(finished, st["x"][rows], moved)
            st["t"][live] += (~st["done"][live]).long()
            self.counts.row_steps += end - start

    # --- adversarial images kept per job ---------------------------------------------------------------------------
    def _kept(self, jobs: list[Job], keep: dict[str, np.ndarray]) -> list[dict[str, Any] | None]:
        """Per job: None, or its kept images' slots (N,) (-1: not kept) and buffers (K, J, ...) of breaking and of
        last iterates, the clean images to start."""
        out: list[dict[str, Any] | None] = []
        for job in jobs:
            images = keep.get(job.name)
            if images is None:
                out.append(None)
                continue
            slot = np.full(len(self.images), -1)
            slot[images] = np.arange(len(images))
            clean = self.images[torch.from_numpy(np.asarray(images, dtype=np.int64)).to(self.device)]
            start = clean[:, None].expand(-1, len(self.grid), *clean.shape[1:]).clone()
            out.append({"slot": slot, "images": np.asarray(images), "broken": start, "last": start.clone()})
        return out

    def _keep(self, pool: _Pool, finished: np.ndarray, broken: np.ndarray, kept: list[dict[str, Any] | None]) -> None:
        """Store the kept images of the finished rows: a breaking row's first breaking iterate, else its last."""
        st = pool.state
        for a in np.unique(pool.rows.job[finished]):
            if kept[a] is None:
                continue
            rows = finished[pool.rows.job[finished] == a]
            slots = kept[a]["slot"][pool.rows.image[rows]]
            rows, slots = rows[slots >= 0], slots[slots >= 0]
            hit = broken[rows]
            for mask, source, into in ((hit, "adversarial", "broken"), (~hit, "x", "last")):
                if mask.any():
                    index = torch.from_numpy(rows[mask]).to(self.device)
                    kept[a][into][slots[mask], pool.rows.eps[rows[mask]]] = st[source][index]


def pool_rows(model: Classifier, sample: torch.Tensor) -> int:
    """Rows in the pool for `model` on the device of `sample` (one input batch): CPU_ROWS on a CPU; on a GPU as many
    as fit in GPU_MEMORY_SHARE of its free memory, each a forward and backward pass (measured on 64 rows) and the
    pool's state (about 12 images), at most MAX_ROWS."""
    if sample.device.type != "cuda":
        return CPU_ROWS
    torch.cuda.synchronize(sample.device)
    free, _ = torch.cuda.mem_get_info(sample.device)
    before = torch.cuda.memory_allocated(sample.device)
    torch.cuda.reset_peak_memory_stats(sample.device)
    x = sample[:1].expand(64, *sample.shape[1:]).clone().requires_grad_(True)
    with without_unused_heads(model), _evaluating(model):
        (grad,) = torch.autograd.grad(model(x).logits.float().sum(), x)
    per_row = (torch.cuda.max_memory_allocated(sample.device) - before) / 64 + 12 * x[0].numel() * 4
    del x, grad
    return int(min(MAX_ROWS, max(CPU_ROWS, GPU_MEMORY_SHARE * free / per_row)))


def _blocks(items: list[Any]) -> Iterator[tuple[Any, int, int]]:
    """(item, start, end) of each run of equal consecutive items."""
    start = 0
    for i in range(1, len(items) + 1):
        if i == len(items) or items[i] != items[start]:
            yield items[start], start, i
            start = i


def row_key(seed: int, stream: str, image_id: int) -> int:
    """31 random bits fixed by (seed, pass stream, image id): the seed of a row's own draws (capsbench.attacks.
    step_rules.uniform)."""
    digest = hashlib.blake2b(f"{seed}/{stream}/{image_id}/key".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little") & ((1 << 31) - 1)


def _first_break_else_last(kept: dict[str, Any], broken: np.ndarray) -> torch.Tensor:
    """(K, J, ...) per kept image and eps: the image that broke it where one did, else the last pass's last
    iterate."""
    hit = torch.from_numpy(broken[kept["images"]]).to(kept["last"].device)
    return torch.where(hit.view(*hit.shape, *(1,) * (kept["last"].dim() - 2)), kept["broken"], kept["last"])


@contextmanager
def _evaluating(model: Classifier) -> Iterator[None]:
    """The model in eval mode while the block runs (dropout off, batch statistics frozen), then as it was."""
    was = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was)


def _rows(out: Any, start: int, end: int) -> Any:
    """The rows start:end of a forward pass's output (a ModelOutput, or a tensor)."""
    if isinstance(out, torch.Tensor):
        return out[start:end]
    return dataclasses.replace(out, **{f.name: getattr(out, f.name)[start:end] for f in dataclasses.fields(out)
                                       if isinstance(getattr(out, f.name), torch.Tensor)})


def run_attack(model: Classifier, attack: Attack, images: torch.Tensor, labels: torch.Tensor, ids: Sequence[int],
               eps_values: list[float], settings: EngineSettings, *, name: str = "attack") -> AttackResult:
    """One attack alone on every image (N, C, H, W) in [0, 1] on the model's device, at each eps: which images it
    broke (CPU bools) and the adversarial images (the first breaking iterate, else the last pass's last iterate)."""
    attack = attack.for_norm(settings.norm)
    if isinstance(attack, QueryAttack):
        return attack.run(model, images, labels, ids, eps_values, settings)
    grid = sorted(set(eps_values))
    job = Job(name, attack, grid, np.ones(len(images), dtype=bool), True,
              {e: attack.passes(e, settings.num_classes, settings.norm) for e in grid})
    outcome = RowEngine(model, images, labels, ids, grid, settings).run([job], keep={name: np.arange(len(images))})[0]
    return AttackResult({e: torch.from_numpy(outcome.broken[:, grid.index(e)].copy()) for e in eps_values},
                        {e: outcome.adversarial[:, grid.index(e)] for e in eps_values})
