"""Telemetry in columns: what ``info["telemetry"]`` says of many episodes, as arrays.

:class:`TelemetryColumns` is the measurement of every episode after a step, one ``(episodes,
jobs)`` array per field of :class:`~dlsched.envs.telemetry.JobTelemetry`. The observation
(:func:`dlsched.envs.observation.encode`), the named rewards (:mod:`dlsched.envs.rewards`) and the
infos are computed from it, for one episode or many alike; :meth:`TelemetryColumns.telemetry`
builds one episode's typed :class:`~dlsched.envs.telemetry.Telemetry` from it (what baselines
read), and :meth:`TelemetryColumns.of` the columns of a typed snapshot.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dlsched.envs.episode_batch import (
    DONE,
    IS_ACTIVE,
    MIGRATING,
    PHASE_OF_STATE,
    STATE_OF_PHASE,
    UNPLACED,
    EpisodeBatch,
)
from dlsched.envs.scenarios.model import JobKind, JobSpec
from dlsched.envs.telemetry import (
    JobState,
    JobTelemetry,
    Telemetry,
    WorkerTelemetry,
    measurement_template,
    waiting_job,
)


@dataclass
class TelemetryColumns:
    """Every episode's telemetry as ``(episodes, jobs)`` arrays (``(episodes, workers)`` for
    workers), in the units of :class:`~dlsched.envs.telemetry.JobTelemetry`.

    Attributes:
        training: the jobs train (else they serve).
        time_s: per episode, its time (s since it started).
        interval_s: the seconds a step covers.
        cores: per worker, its cores.
        specs: per episode, its jobs in column order.
        templates: per episode, each job's measurement template.
        phase: where each job is in its life (:mod:`dlsched.envs.episode_batch`'s phases).
        present: the job has arrived (placed or waiting), so it is in the telemetry.
        waiting: arrived, no slot yet.
        active: holds a slot (running, starting or migrating).
        migrating: active and paused by a migration.
        done: a training job that finished.
        worker: its worker (meaningful where placed).
        slot: its slot (meaningful where placed).
        limit: the limit in force.
        cpu_usage: cores used over the last step.
        cpu_seconds: CPU-seconds used since it was placed.
        age_s: seconds since it arrived.
        target_s: latency target; NaN for training jobs.
        tolerance: the satisfaction tolerance.
        units: batches (service) or iterations (training) completed.
        latency_s: latency of the last batch; NaN without one.
        iterations: training iterations done (0 for inference).
        iterations_before: the same at the telemetry before (0 where absent then).
        total_iterations: the iterations a training job runs; 0 for inference.
        loss: the last loss; NaN without one.
        first_loss: the first loss the job reported; NaN without one.
        completed_s: when a training job finished; NaN before.
        throttle_ratio: the fraction of its quota's CFS periods in which it was throttled over
            the last step; NaN where not measured.
        worker_usage: per worker, cores its active jobs used over the last step.
        worker_jobs: per worker, its active jobs.
    """

    training: bool
    time_s: np.ndarray
    interval_s: float
    cores: np.ndarray
    specs: Sequence[tuple[JobSpec, ...]]
    templates: Sequence[tuple[dict[str, Any], ...]]
    phase: np.ndarray
    present: np.ndarray
    waiting: np.ndarray
    active: np.ndarray
    migrating: np.ndarray
    done: np.ndarray
    worker: np.ndarray
    slot: np.ndarray
    limit: np.ndarray
    cpu_usage: np.ndarray
    cpu_seconds: np.ndarray
    age_s: np.ndarray
    target_s: np.ndarray
    tolerance: np.ndarray
    units: np.ndarray
    latency_s: np.ndarray
    iterations: np.ndarray
    iterations_before: np.ndarray
    total_iterations: np.ndarray
    loss: np.ndarray
    first_loss: np.ndarray
    completed_s: np.ndarray
    throttle_ratio: np.ndarray
    worker_usage: np.ndarray
    worker_jobs: np.ndarray

    @property
    def measured(self) -> np.ndarray:
        """Active inference jobs with a latency (those in one of DQoES's sets)."""
        better, satisfied, worse = self.qoe()
        return better | satisfied | worse

    def qoe(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Masks of DQoES's sets G, S and B among the active jobs with a latency
        (``JobTelemetry.qoe_class``).

        Computed once (the reward, the observation and the info all read them): a step's
        columns are not changed once read.
        """
        return self._qoe_sets

    @functools.cached_property
    def _qoe_sets(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        # A job without a latency (or a target) has a NaN quality, which no comparison holds:
        # it is in no set.
        quality = self.target_s - self.latency_s
        band = self.tolerance * self.target_s
        better = self.active & (quality > band)
        worse = self.active & (quality < -band)
        satisfied = self.active & (quality <= band) & (quality >= -band)
        return better, satisfied, worse

    @functools.cached_property
    def satisfied_count(self) -> np.ndarray:
        """Per episode, active jobs in S (``info["satisfied"]``); the reward and the info both
        read it."""
        return self.qoe()[1].sum(axis=1)

    def telemetry(self, row: int) -> Telemetry:
        """Episode ``row``'s telemetry as a typed snapshot (what ``info["telemetry"]`` carries
        and baselines read), built on each call."""
        now = float(self.time_s[row])
        # One row of each array as Python numbers, then one object per job built from its
        # fields (JobTelemetry.from_fields): the cost of a baseline's step.
        phase = self.phase[row].tolist()
        waiting = self.waiting[row].tolist()
        worker = self.worker[row].tolist()
        slot = self.slot[row].tolist()
        limit = self.limit[row].tolist()
        usage = self.cpu_usage[row].tolist()
        cpu_seconds = self.cpu_seconds[row].tolist()
        units = self.units[row].tolist()
        latency = self.latency_s[row].tolist()
        loss = self.loss[row].tolist()
        completed = self.completed_s[row].tolist()
        throttle = self.throttle_ratio[row].tolist()
        total = self.total_iterations[row].tolist()
        specs = self.specs[row]
        state_of = STATE_OF_PHASE
        jobs = []
        for job, template in enumerate(self.templates[row]):
            if phase[job] == UNPLACED:
                if waiting[job]:
                    jobs.append(waiting_job(specs[job], now))
                continue
            fields = template.copy()
            fields["state"] = state_of[phase[job]]
            fields["worker"] = worker[job]
            fields["slot"] = slot[job]
            fields["age_s"] = now - fields["arrival_s"]
            fields["limit"] = limit[job]
            fields["cpu_usage"] = usage[job]
            fields["cpu_seconds"] = cpu_seconds[job]
            if self.training:
                fields["iterations"] = units[job]
                fields["total_iterations"] = total[job]
            else:
                fields["batches"] = units[job]
            # NaN (no measurement yet) is the only value unequal to itself: it reads None.
            latency_s, loss_s, completed_s = latency[job], loss[job], completed[job]
            if latency_s == latency_s:
                fields["latency_s"] = latency_s
            if loss_s == loss_s:
                fields["loss"] = loss_s
            if completed_s == completed_s:
                fields["completed_s"] = completed_s
            throttle_ratio = throttle[job]
            if throttle_ratio == throttle_ratio:
                fields["throttle_ratio"] = throttle_ratio
            jobs.append(JobTelemetry.from_fields(fields))
        cores = self.cores.tolist()
        worker_usage = self.worker_usage[row].tolist()
        workers = tuple(WorkerTelemetry(w, cores[w], worker_usage[w]) for w in range(len(cores)))
        return Telemetry(time_s=now, interval_s=self.interval_s, workers=workers, jobs=tuple(jobs))

    @classmethod
    def of(cls, now: Telemetry, before: Telemetry | None = None) -> TelemetryColumns:
        """The columns of one typed snapshot (one episode; its jobs in their order), with
        ``before``'s iterations as ``iterations_before`` (a reward of
        :mod:`dlsched.envs.rewards` on telemetry)."""
        jobs = now.jobs
        count = max(len(jobs), 1)
        done_before = {job.job_id: job.iterations for job in before.jobs} if before else {}

        def column(values: Sequence[float], fill: float, dtype: type = np.float64) -> np.ndarray:
            array: np.ndarray = np.full((1, count), fill, dtype=dtype)
            array[0, : len(values)] = values
            return array

        def number(value: float | None) -> float:
            return math.nan if value is None else value

        phase = column([PHASE_OF_STATE.get(job.state, UNPLACED) for job in jobs], UNPLACED, np.int8)
        waiting = column([job.state is JobState.WAITING for job in jobs], False, bool)
        active = IS_ACTIVE[phase]
        training = [job.kind is JobKind.TRAINING for job in jobs]
        worker_count = len(now.workers)
        worker_usage = np.array([[w.cpu_usage for w in now.workers]])
        worker_jobs = np.zeros((1, worker_count), dtype=np.int64)
        for job in now.active_jobs:
            if job.worker is not None:
                worker_jobs[0, job.worker] += 1
        spec = [
            JobSpec(job.job_id, job.workload, job.kind, job.arrival_s, job.target_s, job.tolerance)
            for job in jobs
        ]
        return cls(
            training=any(training),
            time_s=np.array([now.time_s]),
            interval_s=now.interval_s,
            cores=np.array([w.cores for w in now.workers]),
            specs=[tuple(spec)],
            templates=[tuple(measurement_template(job) for job in spec)],
            phase=phase,
            present=column([True] * len(jobs), False, bool),
            waiting=waiting,
            active=active,
            migrating=phase == MIGRATING,
            done=phase == DONE,
            worker=column([job.worker or 0 for job in jobs], 0, np.int64),
            slot=column([job.slot or 0 for job in jobs], 0, np.int64),
            limit=column([job.limit for job in jobs], 1.0),
            cpu_usage=column([job.cpu_usage for job in jobs], 0.0),
            cpu_seconds=column([job.cpu_seconds for job in jobs], 0.0),
            age_s=column([job.age_s for job in jobs], 0.0),
            target_s=column([number(job.target_s) for job in jobs], math.nan),
            tolerance=column([job.tolerance for job in jobs], 0.1),
            units=column(
                [j.iterations if t else j.batches for j, t in zip(jobs, training, strict=True)],
                0,
                np.int64,
            ),
            latency_s=column([number(job.latency_s) for job in jobs], math.nan),
            iterations=column([job.iterations for job in jobs], 0, np.int64),
            iterations_before=column([done_before.get(job.job_id, 0) for job in jobs], 0, np.int64),
            total_iterations=column([job.total_iterations or 0 for job in jobs], 0, np.int64),
            loss=column([number(job.loss) for job in jobs], math.nan),
            first_loss=column([math.nan for _ in jobs], math.nan),
            completed_s=column([number(job.completed_s) for job in jobs], math.nan),
            throttle_ratio=column([number(job.throttle_ratio) for job in jobs], math.nan),
            worker_usage=worker_usage,
            worker_jobs=worker_jobs,
        )


def columns_of(
    batch: EpisodeBatch,
    usage: np.ndarray,
    first_loss: np.ndarray,
    waiting: np.ndarray | None = None,
    iterations_before: np.ndarray | None = None,
    rows: np.ndarray | None = None,
) -> TelemetryColumns:
    """The columns of ``batch`` as it is now, of ``rows`` (indices) or of every episode.

    Args:
        batch: the episodes.
        usage: ``(episodes, jobs)``, the CPU usage to report per job (the caller's measure).
        first_loss: ``(episodes, jobs)``, each job's first reported loss (NaN: none yet).
        waiting: ``(episodes, jobs)``, the jobs that arrived and wait for a slot; ``None``: none.
        iterations_before: ``(episodes, jobs)``, each job's iterations at the measurement
            before; ``None``: 0 (none before).
        rows: the episodes to take, or ``None`` for all.
    """
    state = batch.state
    active_all = state.exists & IS_ACTIVE[state.phase]
    at, cells = batch.worker_cells(active_all)
    size = batch.episodes * batch.workers
    shape = (batch.episodes, batch.workers)
    worker_usage = np.bincount(cells, usage.reshape(-1)[at], minlength=size).reshape(shape)
    worker_jobs = np.bincount(cells, minlength=size).reshape(shape)
    pick = slice(None) if rows is None else rows
    # Copies: the batch changes its arrays in place when time passes.
    phase = state.phase[pick].copy()
    exists = state.exists[pick]
    placed = exists & (phase != UNPLACED)
    active = active_all[pick]
    training = batch.scenario.kind is JobKind.TRAINING
    units = state.units[pick].copy()
    zeros = np.zeros(units.shape, dtype=np.int64)
    now = batch.now[pick].copy()
    return TelemetryColumns(
        training=training,
        time_s=now,
        interval_s=batch.scenario.interval_s,
        cores=batch.cores,
        specs=list(batch.specs) if rows is None else [batch.specs[int(row)] for row in rows],
        templates=list(batch.templates)
        if rows is None
        else [batch.templates[int(row)] for row in rows],
        phase=phase,
        present=placed if waiting is None else placed | waiting[pick],
        waiting=np.zeros(placed.shape, dtype=bool) if waiting is None else waiting[pick],
        active=active,
        migrating=active & (phase == MIGRATING),
        done=exists & (phase == DONE),
        worker=state.worker[pick].copy(),
        slot=state.slot[pick].copy(),
        limit=state.limit[pick].copy(),
        cpu_usage=usage[pick].copy(),
        cpu_seconds=state.cpu_seconds[pick].copy(),
        age_s=now[:, None] - state.arrival[pick],
        target_s=state.target[pick].copy(),
        tolerance=state.tolerance[pick].copy(),
        units=units,
        latency_s=state.latency[pick].copy(),
        iterations=units if training else zeros,
        iterations_before=zeros if iterations_before is None else iterations_before[pick],
        total_iterations=state.total[pick].copy() if training else zeros,
        loss=state.loss[pick].copy(),
        first_loss=first_loss[pick].copy(),
        completed_s=state.completed[pick].copy(),
        throttle_ratio=state.throttle_ratio[pick].copy(),
        worker_usage=worker_usage[pick],
        worker_jobs=worker_jobs[pick],
    )
