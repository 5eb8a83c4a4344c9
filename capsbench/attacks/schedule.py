"""The host side of the row engine: every row a unit's attacks could run (job x image x eps x pass), how each finished,
and which may enter the pool next. A row of an attack reported alone waits only for the earlier passes at its image
and eps; a row of an ensemble attack also waits for every earlier job at its eps and below and for its own job at
smaller eps, and is cancelled once any of them broke its image there: so the rows that run, and the records, are
those of running the attacks one after the other, whatever order the pool takes them in. With speculation a row may
enter before what it waits for has finished (a GPU's width for fewer iterates; cancelled rows are dropped)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from capsbench.attacks.base import Pass, RowAttack

WAITING, RUNNING, ROBUST, BROKEN, CANCELLED, ABSENT = range(6)
UNFINISHED = (WAITING, RUNNING)


@dataclass
class Job:
    """One row attack over some images at some eps: reported alone (every candidate image at every eps) or in the
    ensemble (an image at an eps only while every earlier job, and this one at smaller eps, left it robust there).
    passes[eps] are the attack's passes at each eps."""

    name: str
    attack: RowAttack
    eps: list[float]
    candidates: np.ndarray  # (N,) bool: the images it may attack
    alone: bool
    passes: dict[float, list[Pass]]


@dataclass(frozen=True)
class Rows:
    """Rows as parallel arrays: job, image, eps index (into the unit's grid) and pass."""

    job: np.ndarray
    image: np.ndarray
    eps: np.ndarray
    step: np.ndarray

    def __len__(self) -> int:
        return len(self.job)

    def take(self, index: np.ndarray) -> Rows:
        return Rows(self.job[index], self.image[index], self.eps[index], self.step[index])

    @staticmethod
    def concat(parts: list[Rows]) -> Rows:
        if not parts:
            return Rows(*(np.zeros(0, dtype=np.int64) for _ in range(4)))
        return Rows(*(np.concatenate([getattr(p, f) for p in parts]) for f in ("job", "image", "eps", "step")))


class Schedule:
    """Rows of `jobs` over N images and the eps `grid`. prior_from (N,): the grid index from which an earlier phase of
    the unit already broke each image (len(grid): never), which cancels ensemble rows there and above."""

    def __init__(self, jobs: list[Job], grid: list[float], n: int, *, speculate: bool = False,
                 prior_from: np.ndarray | None = None) -> None:
        self.jobs, self.grid, self.n, self.speculate = jobs, grid, n, speculate
        never = len(grid)
        self.prior_from = np.full(n, never) if prior_from is None else prior_from.astype(np.int64)
        self.status: list[np.ndarray] = []
        self.steps: list[np.ndarray] = []  # per job (J, K): each pass's steps at each eps (0 where absent)
        for job in jobs:
            k = max((len(job.passes[e]) for e in job.eps), default=0)
            status = np.full((n, len(grid), k), ABSENT, dtype=np.int8)
            steps = np.zeros((len(grid), k), dtype=np.int64)
            for e in job.eps:
                j = grid.index(e)
                status[job.candidates, j, : len(job.passes[e])] = WAITING
                steps[j, : len(job.passes[e])] = [p.steps for p in job.passes[e]]
            self.status.append(status)
            self.steps.append(steps)
        self.first_break = np.full((n, len(jobs)), never)  # per image and job: the smallest eps index it broke at
        self._cancel()

    def declared(self) -> int:
        """Row-steps of every row, steps + 1 each (iterate 0 is judged too): the work progress counts."""
        return int(sum(((s != ABSENT) * (steps + 1)[None]).sum() for s, steps in zip(self.status, self.steps)))

    def settled(self) -> int:
        """Row-steps of the rows that finished or were cancelled (each counted whole: what early exit and
        cancelling skip is work done)."""
        return int(sum((((s != ABSENT) & (s != WAITING) & (s != RUNNING)) * (steps + 1)[None]).sum()
                       for s, steps in zip(self.status, self.steps)))

    def passes(self, rows: Rows) -> list[Pass]:
        """The pass each row runs."""
        return [self.jobs[a].passes[self.grid[j]][k] for a, j, k in zip(rows.job, rows.eps, rows.step)]

    def finish(self, rows: Rows, broken: np.ndarray) -> None:
        """Rows that finished, and whether each broke its image; then every row their breaks make needless is
        cancelled (running ones too: running() tells the engine which rows to drop)."""
        for a in np.unique(rows.job):
            mine = rows.job == a
            i, j, k = rows.image[mine], rows.eps[mine], rows.step[mine]
            hit = broken[mine]
            self.status[a][i, j, k] = np.where(hit, BROKEN, ROBUST)
            np.minimum.at(self.first_break[:, a], i[hit], j[hit])
        self._cancel()

    def running(self, rows: Rows) -> np.ndarray:
        """(len(rows),) whether each row is still to be run (not cancelled)."""
        out = np.zeros(len(rows), dtype=bool)
        for a in np.unique(rows.job):
            mine = rows.job == a
            out[mine] = self.status[a][rows.image[mine], rows.eps[mine], rows.step[mine]] == RUNNING
        return out

    def admit(self, room: int) -> Rows:
        """Up to `room` rows to start now, marked running: those whose dependencies have finished first (by job, eps,
        pass, image), then, with speculation, any other waiting row in the same order."""
        if room <= 0:
            return Rows.concat([])
        ready, later = self._candidates()
        chosen = Rows.concat(ready + (later if self.speculate else []))
        chosen = chosen.take(np.arange(min(room, len(chosen))))
        for a in np.unique(chosen.job):
            mine = chosen.job == a
            self.status[a][chosen.image[mine], chosen.eps[mine], chosen.step[mine]] = RUNNING
        return chosen

    def broken(self, a: int) -> np.ndarray:
        """(N, J) whether some pass of job `a` broke each image at each eps of the grid."""
        return (self.status[a] == BROKEN).any(axis=2)

    def waiting(self) -> bool:
        """Whether rows remain that have not entered the pool."""
        return any((s == WAITING).any() for s in self.status)

    def _candidates(self) -> tuple[list[Rows], list[Rows]]:
        """(rows whose dependencies have all finished, every other waiting row), each ordered by job, eps, pass and
        image."""
        ready, later = [], []
        before = np.zeros((self.n, len(self.grid)), dtype=np.int64)  # unfinished rows of earlier jobs at eps <= j
        for a, (job, status) in enumerate(zip(self.jobs, self.status)):
            unfinished = np.isin(status, UNFINISHED).sum(axis=2)  # (N, J)
            upto = np.cumsum(unfinished, axis=1)
            waiting = status == WAITING
            if waiting.any():
                chain_free = waiting.any(axis=2) & ~(status == RUNNING).any(axis=2)
                if not job.alone:
                    chain_free &= (before + upto - unfinished) == 0
                first = waiting.argmax(axis=2)  # the chain's next pass
                ok = np.zeros_like(waiting)
                i, j = np.nonzero(chain_free)
                ok[i, j, first[i, j]] = True
                ready.append(self._ordered(a, ok))
                if self.speculate:
                    later.append(self._ordered(a, waiting & ~ok))
            before += upto
        return ready, later

    @staticmethod
    def _ordered(a: int, mask: np.ndarray) -> Rows:
        """The rows of job `a` where mask (N, J, K) holds, ordered by eps, pass, image."""
        j, k, i = np.nonzero(mask.transpose(1, 2, 0))
        return Rows(np.full(len(i), a), i, j, k)

    def _cancel(self) -> None:
        """Cancel the unfinished rows whose image is known broken where they would attack it: in an ensemble job, any
        break by it or an earlier job at this eps or a smaller one (or by an earlier phase); in a job reported alone,
        a break by another of its passes at the same eps."""
        eps_index = np.arange(len(self.grid))[None, :, None]
        for a, (job, status) in enumerate(zip(self.jobs, self.status)):
            open_ = np.isin(status, UNFINISHED)
            if not open_.any():
                continue
            if job.alone:
                kill = (status == BROKEN).any(axis=2, keepdims=True) & open_
            else:
                from_ = np.minimum(self.prior_from, self.first_break[:, : a + 1].min(axis=1))  # (N,)
                kill = (eps_index >= from_[:, None, None]) & open_
            status[kill] = CANCELLED
