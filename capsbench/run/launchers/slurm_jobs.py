"""Units as SLURM jobs through submitit (slurm.cluster=local: the same jobs as local processes, for tests and laptops).

First wave, one job array: a training job per checkpoint that several units need (remote.groups) and a measuring job
per unit that shares its checkpoint with none. When a training job finishes, its units' measuring jobs go out as
another array. A job that fails (its exception, time limit, a lost node) is resubmitted up to slurm.max_retries times;
then its units are handed back failed and the others go on. Jobs write their logs and pickles under slurm.folder, and
their units' events to slurm.folder/events/<unit key>.jsonl, which the driver reads at every poll.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import submitit
from omegaconf import DictConfig

from capsbench.run.execute import Sink
from capsbench.run.launchers import remote
from capsbench.run.units import UnitResult, UnitSpec, failed
from capsbench.util.signals import spawning

log = logging.getLogger(__name__)
POLL_SECONDS = 1.0  # between looks at the jobs; submitit throttles its own sacct calls


@dataclass
class Work:
    """One job to run: "train" the checkpoint of `units`, or "measure" its one unit (`trained`: after its group's
    training job); `tries` so far."""

    kind: str
    units: list[UnitSpec]
    trained: bool = False
    tries: int = 0

    @property
    def spec(self) -> UnitSpec:
        return remote.after_training(self.units[0]) if self.trained else self.units[0]


class SlurmLauncher:
    """Runs units as submitit jobs and yields their results in the order they finish.

    Args:
        cfg: the run config; reads output_dir (default folder) and slurm.* (launchers/settings.py).
    """

    def __init__(self, cfg: DictConfig) -> None:
        s = self.settings = cfg.slurm
        self.folder = Path(s.folder or Path(cfg.output_dir) / "slurm")
        self._events: dict[str, remote.EventFile] = {}
        self.executor = submitit.AutoExecutor(folder=self.folder, cluster=s.cluster)
        self.executor.update_parameters(
            name="capsbench", timeout_min=s.time, gpus_per_node=s.gpus_per_unit, cpus_per_task=s.cpus_per_unit,
            slurm_partition=s.partition, slurm_array_parallelism=s.array_parallelism)

    def events(self, unit: UnitSpec) -> remote.EventFile:
        """The events file of `unit` (a training job writes to its group's first unit's), one reader per run; a file
        an earlier run left is removed before the first job of this run writes to it."""
        if unit.key not in self._events:
            path = self.folder / "events" / f"{unit.key}.jsonl"
            path.unlink(missing_ok=True)
            self._events[unit.key] = remote.EventFile(path)
        return self._events[unit.key]

    def run(self, units: list[UnitSpec], on_event: Sink) -> Iterator[UnitResult]:
        queue = [Work("train", g) if len(g) > 1 else Work("measure", g) for g in remote.groups(units)]
        running: list[tuple[Any, Work]] = []
        try:
            while queue or running:
                running += self._submit(queue, len(running))
                time.sleep(POLL_SECONDS)
                still = []
                for job, work in running:
                    done = job.done()  # before reading its events: an ended job has written all of them
                    for event in self.events(work.units[0]).read_new():
                        on_event(event)
                    if not done:
                        still.append((job, work))
                        continue
                    yield from self._finished(job, work, queue)
                running = still
        finally:
            for job, _ in running:  # the driver stopped early (a fatal error, Ctrl-C): give the allocation back
                self._cancel(job)

    def _cancel(self, job: Any) -> None:
        """End a job as scancel does, with SIGTERM: submitit's local cancel sends its job's controller a SIGINT, which
        its jobs inherit blocked (_submit) and which would leave a traceback; a local job's id is its controller's
        process id, and the controller passes SIGTERM on to the job."""
        if self.settings.cluster != "local":
            job.cancel(check=False)
            return
        with contextlib.suppress(ProcessLookupError):  # it ended since the last poll
            os.kill(int(job.job_id), signal.SIGTERM)

    def _submit(self, queue: list[Work], running: int) -> list[tuple[Any, Work]]:
        """Submit queued work as one job array. Local processes are started at most array_parallelism at a time
        (SLURM itself holds back the tasks of an array beyond it)."""
        room = len(queue) if self.settings.cluster == "slurm" else self.settings.array_parallelism - running
        batch, queue[:] = queue[:room], queue[room:]
        if not batch:
            return []
        for work in batch:
            work.tries += 1
        local = self.settings.cluster == "local"  # local jobs share this terminal: Ctrl-C must reach only the driver
        with spawning() if local else contextlib.nullcontext():
            jobs = self.executor.map_array(remote.job_entry, [w.kind for w in batch],
                                           [w.spec.to_dict() for w in batch],
                                           [str(self.events(w.units[0]).path) for w in batch])
        log.info("submitted %d job(s) to %s: %s", len(jobs), self.settings.cluster, ", ".join(j.job_id for j in jobs))
        return list(zip(jobs, batch))

    def _finished(self, job: Any, work: Work, queue: list[Work]) -> Iterator[UnitResult]:
        """Results (or follow-up work) of a job that ended."""
        exc = job.exception()
        if exc is None:
            answer = job.result()
            if work.kind == "measure":
                yield remote.unpack(work.units[0], answer)
            elif remote.FATAL in answer:
                remote.unpack(work.units[0], answer)  # raises the CapsbenchError
            else:
                queue.extend(Work("measure", [unit], trained=True) for unit in work.units)
            return
        reason = _last_line(exc)
        if work.tries <= self.settings.max_retries:
            log.warning("job %s (%s %s) failed: %s; resubmitting (try %d of %d)", job.job_id, work.kind,
                        work.units[0].name, reason, work.tries + 1, self.settings.max_retries + 1)
            queue.append(work)
            return
        for unit in work.units:
            result = failed(unit, exc)
            result.error = f"job {job.job_id} failed {work.tries} time(s): {reason} (log: {job.paths.stderr})"
            yield result


def _last_line(exc: BaseException) -> str:
    """The exception a job's traceback ends with: submitit hands back the trace as text between two dashed lines,
    followed by the log paths."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    rules = [i for i, line in enumerate(lines) if set(line) == {"-"}]
    trace = lines[rules[0] + 1:rules[1]] if len(rules) >= 2 else lines
    return trace[-1] if trace else type(exc).__name__
