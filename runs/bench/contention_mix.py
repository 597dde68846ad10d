"""``dlsched bench mix``: a mix of different training workloads on one worker, host and model.

The replay model's contention term (:mod:`dlsched.envs.replay.contention`) gives each job an
efficiency from the threads runnable beside it and its own workload's curve, and ``dlsched
calibrate`` fits those curves on copies of one workload. Whether the workloads *beside* a job
matter is what this benchmark measures: one job per named workload on the engine's worker, with
one threading, and the same protocol on the replay model:

1. every job starts; then each in turn runs **alone**, uncapped, while the others are parked at
   :data:`PARKED_LIMIT` of the worker (their threads barely run): its solo rate and cores;
2. all of them in **free** competition (no limits), then at **equal** limits (``1 / n`` each).

A job's efficiency in a cell is its rate over its solo rate at the cores it used there: the
profile's throughput curve at those cores, scaled to the solo rate just measured on the same
backend (so the host's speed of the moment cancels, as in ``validate``'s probe). Without
contention every efficiency is 1; the replay model's figures are what it predicts for the same
cell, so a workload whose host efficiency is far below its model efficiency loses more beside
*these* partners than its own curve says.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from dlsched.envs.arguments import DEFAULT_LIMIT_FLOOR
from dlsched.envs.backend import Backend
from dlsched.envs.controlled_episode import ControlledEpisode
from dlsched.envs.decision import Placement
from dlsched.envs.docker.backend import DockerBackend
from dlsched.envs.docker.engine import engine_cores
from dlsched.envs.errors import BackendError, UnknownNameError
from dlsched.envs.replay.backend import ReplayBackend
from dlsched.envs.replay.profile import load_profile_set
from dlsched.envs.scenarios.model import ArrivalPattern, JobGroup, JobKind, Scenario, WorkerSpec
from dlsched.envs.workloads.cpu_quota import THREADINGS, Threading
from dlsched.runs.fidelity.contention_grid import JobSample, allocation_limits
from dlsched.runs.fidelity.contention_measurement import (
    ENDLESS_ITERATIONS,
    TRAINING_WORKLOADS,
    measure_window,
    wait_for_first_units,
)

#: The allocations measured after the solo runs, in order.
MIX_ALLOCATIONS: tuple[str, ...] = ("free", "equal")
#: The limit (fraction of the worker) of the jobs parked while another runs alone: the smallest
#: quota an environment gives, so that their threads barely run.
PARKED_LIMIT = DEFAULT_LIMIT_FLOOR
#: The profile set each threading's replay side runs on.
PROFILE_SETS: dict[str, str] = {"tuned": "measured", "stock": "measured-stock"}


@dataclass(frozen=True)
class MixCell:
    """The jobs of the mix together under one allocation, on both sides.

    Attributes:
        allocation: ``free`` or ``equal``.
        limits: each job's limit, in the order of :attr:`MixResult.workloads`.
        host: each job's rate and cores on the engine.
        replay: the same on the replay model.
        host_efficiency: each job's rate over its solo rate at the cores it used, on the engine.
        replay_efficiency: the same on the replay model.
    """

    allocation: str
    limits: tuple[float, ...]
    host: tuple[JobSample, ...]
    replay: tuple[JobSample, ...]
    host_efficiency: tuple[float, ...]
    replay_efficiency: tuple[float, ...]


@dataclass(frozen=True)
class MixResult:
    """The figures of ``dlsched bench mix``.

    Attributes:
        workloads: one job per workload, in this order.
        threading: the workloads' threading.
        cores: the worker's cores.
        profile_set: the replay side's profile set.
        window_s: seconds each rate is measured over.
        settle_s: seconds waited after each change of limits.
        host_solo: each job alone (the others parked), on the engine.
        replay_solo: the same on the replay model.
        cells: every allocation of :data:`MIX_ALLOCATIONS`.
    """

    workloads: tuple[str, ...]
    threading: str
    cores: float
    profile_set: str
    window_s: float
    settle_s: float
    host_solo: tuple[JobSample, ...]
    replay_solo: tuple[JobSample, ...]
    cells: tuple[MixCell, ...]

    def report(self) -> str:
        lines = [
            f"{' + '.join(self.workloads)} ({self.threading} threading) on {self.cores:g} "
            f"cores, rates over {self.window_s:g} s windows; efficiency = a job's iterations/s "
            "over its own alone at the cores it used (1: no contention); replay on "
            f"'{self.profile_set}'",
            f"  {'workload':12} {'alone it/s':>10} "
            + "".join(
                f"{cell.allocation + ': cores':>14} {'host':>6} {'replay':>7}"
                for cell in self.cells
            ),
        ]
        for index, workload in enumerate(self.workloads):
            lines.append(
                f"  {workload:12} {self.host_solo[index].rate:10.1f} "
                + "".join(
                    f"{cell.host[index].cores:14.2f} {cell.host_efficiency[index]:6.2f} "
                    f"{cell.replay_efficiency[index]:7.2f}"
                    for cell in self.cells
                )
            )
        lines.append(
            "Where a workload's host efficiency is far below replay's, it loses more beside these "
            "partners than the model (fitted on copies of one workload) says."
        )
        return "\n".join(lines)


@dataclass(frozen=True)
class MixSide:
    """The protocol's measurements on one backend.

    Attributes:
        solo: each job alone (the others parked), in the scenario's job order.
        cells: each allocation of :data:`MIX_ALLOCATIONS`, one sample per job.
        efficiencies: per cell, each job's rate over its solo rate at the cores it used.
    """

    solo: tuple[JobSample, ...]
    cells: tuple[tuple[JobSample, ...], ...]
    efficiencies: tuple[tuple[float, ...], ...]


def measure_mix(
    workloads: Sequence[str],
    threading: str = "stock",
    window_s: float = 15.0,
    settle_s: float = 5.0,
    endpoint: str | None = None,
    image: str | None = None,
    say: Callable[[str], None] | None = None,
) -> MixResult:
    """Measure the mix on the engine, then the same protocol on the replay model.

    Args:
        workloads: at least two training workloads, one job each.
        threading: ``"tuned"`` or ``"stock"``.
        window_s: seconds each rate is measured over.
        settle_s: seconds waited after each change of limits before measuring.
        endpoint: the engine (``None``: the environment's).
        image: the workload image (``None``: dlsched's own).
        say: where progress lines go (``None``: nowhere).

    Raises:
        UnknownNameError: a workload that is not a training workload (before any container
            starts).
        BackendError: other bad arguments (likewise), or a job that stopped.
    """
    names = tuple(workloads)
    for name in names:
        if name not in TRAINING_WORKLOADS:
            raise UnknownNameError("training workload", name, TRAINING_WORKLOADS)
    if len(names) < 2:
        raise BackendError(
            f"workloads {list(names)}: a mix needs at least 2 (bench contention measures copies "
            "of one)"
        )
    if threading not in THREADINGS:
        raise BackendError(f"threading {threading!r}: expected one of {list(THREADINGS)}")
    if not window_s > 0 or not settle_s >= 0:
        raise BackendError(
            f"window_s={window_s!r}, settle_s={settle_s!r}: the window must be positive and the "
            "settling time at least 0"
        )
    chosen: Threading = "stock" if threading == "stock" else "tuned"
    cores = engine_cores(endpoint)
    scenario = mix_scenario(names, cores, chosen, endpoint)
    host = measure_side(
        DockerBackend(image=image, workload_threading=chosen), scenario, window_s, settle_s, say
    )
    replay = measure_side(ReplayBackend(), scenario, window_s, settle_s)
    cells = tuple(
        MixCell(
            allocation,
            allocation_limits(allocation, len(names)),
            host.cells[index],
            replay.cells[index],
            host.efficiencies[index],
            replay.efficiencies[index],
        )
        for index, allocation in enumerate(MIX_ALLOCATIONS)
    )
    return MixResult(
        names,
        chosen,
        cores,
        scenario.profile_set,
        window_s,
        settle_s,
        host.solo,
        replay.solo,
        cells,
    )


def mix_scenario(
    workloads: Sequence[str], cores: float, threading: Threading, endpoint: str | None
) -> Scenario:
    """One endless job per workload on one worker of ``cores`` cores."""
    return Scenario(
        name="bench-mix",
        kind=JobKind.TRAINING,
        workers=(WorkerSpec(cores=cores, endpoint=endpoint),),
        groups=tuple(
            JobGroup(workloads=(name,), arrival=ArrivalPattern(), iterations=ENDLESS_ITERATIONS)
            for name in workloads
        ),
        slots_per_worker=len(workloads),
        profile_set=PROFILE_SETS[threading],
        workload_threading=threading,
    )


def measure_side(
    backend: Backend,
    scenario: Scenario,
    window_s: float,
    settle_s: float,
    say: Callable[[str], None] | None = None,
) -> MixSide:
    """Run the protocol (each job alone, the others parked; then every allocation) on
    ``backend``, which it closes.

    Args:
        backend: a fresh backend (the engine's, or the replay model).
        scenario: the mix (:func:`mix_scenario`).
        window_s: seconds each rate is measured over.
        settle_s: seconds waited after each change of limits before measuring.
        say: where progress lines go (``None``: nowhere).
    """
    report = say or (lambda _: None)
    specs = scenario.realise(np.random.default_rng(0))
    ids = [spec.job_id for spec in specs]
    episode = ControlledEpisode(backend, scenario)
    try:
        episode.reset(specs, np.random.default_rng(0))
        episode.place([Placement(job_id, 0, slot) for slot, job_id in enumerate(ids)])
        wait_for_first_units(episode, ids)
        solo = []
        for index, spec in enumerate(specs):
            report(f"{spec.workload} alone, the others parked")
            alone = {job_id: (1.0 if job_id == spec.job_id else PARKED_LIMIT) for job_id in ids}
            samples, _ = measure_window(episode, alone, settle_s, window_s, inference=False)
            solo.append(samples[index])
        cells = []
        for allocation in MIX_ALLOCATIONS:
            limits = allocation_limits(allocation, len(ids))
            report(f"all {len(ids)}, {allocation}")
            samples, _ = measure_window(
                episode, dict(zip(ids, limits, strict=True)), settle_s, window_s, inference=False
            )
            cells.append(tuple(samples))
    finally:
        episode.close()
        backend.close()
    curves = load_profile_set(scenario.profile_set)

    def efficiency(workload: str, alone: JobSample, sample: JobSample) -> float:
        # the profile's curve gives the shape, the solo run just measured the level
        points = curves[workload].throughput
        shape = float(np.interp(sample.cores, points.cores, points.units_per_s))
        level = alone.rate / float(np.interp(alone.cores, points.cores, points.units_per_s))
        return sample.rate / (shape * level) if shape > 0 and level > 0 else float("nan")

    return MixSide(
        tuple(solo),
        tuple(cells),
        tuple(
            tuple(
                efficiency(spec.workload, alone, sample)
                for spec, alone, sample in zip(specs, solo, cell, strict=True)
            )
            for cell in cells
        ),
    )
