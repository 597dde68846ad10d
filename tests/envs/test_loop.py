"""The environment loop (:mod:`dlsched.envs.loop`) driven directly on the replay engine, without
an environment around it: what a reset places, where a step's limits go, arrivals placed at their
time or waiting for a slot, placers, migrations and their refusals, the ends of an episode."""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import pytest

from dlsched.envs.backend_registry import make_backend
from dlsched.envs.decision import Migration
from dlsched.envs.errors import ActionError
from dlsched.envs.loop import SchedulingLoop, episode_generators
from dlsched.envs.placement import Placer
from dlsched.envs.scenarios.model import (
    ArrivalKind,
    ArrivalPattern,
    JobGroup,
    JobKind,
    JobSpec,
    Scenario,
    WorkerSpec,
)
from dlsched.envs.telemetry import JobState, Telemetry
from dlsched.envs.telemetry_columns import TelemetryColumns

SLOTS = 2
"""Slots per worker of the scenarios below."""


def services(*groups: JobGroup, workers: int = 2, horizon_s: float = 60.0) -> Scenario:
    """ResNet-50 services on ``workers`` workers of 4 cores and 2 slots each, 10 s a step."""
    return Scenario(
        name="loop-services",
        kind=JobKind.INFERENCE,
        workers=tuple(WorkerSpec(4.0) for _ in range(workers)),
        groups=groups,
        interval_s=10.0,
        horizon_s=horizon_s,
        slots_per_worker=SLOTS,
    )


def resnets(count: int, *times_s: float, worker: int | None = None) -> JobGroup:
    """``count`` ResNet-50 services arriving at ``times_s`` (at 0 without), pinned to
    ``worker`` if given."""
    arrival = ArrivalPattern(ArrivalKind.EXPLICIT, times_s=times_s) if times_s else ArrivalPattern()
    return JobGroup(("resnet50",), count=count, arrival=arrival, targets_s=(20.0,), worker=worker)


#: Three services at 0 s on two workers, then one at 15 s and two at 25 s, which find the slots
#: full.
CROWDED = services(resnets(3), resnets(3, 15.0, 25.0, 25.0))

#: Three short MNIST trainings (30 iterations) on one worker of two slots: the third waits.
TRAININGS = Scenario(
    name="loop-trainings",
    kind=JobKind.TRAINING,
    workers=(WorkerSpec(4.0),),
    groups=(JobGroup(("mnist-pytorch",), count=3, iterations=30),),
    interval_s=10.0,
    horizon_s=6000.0,
    slots_per_worker=SLOTS,
)


def started(
    scenario: Scenario, episodes: int = 1, placer: Placer | None = None
) -> tuple[SchedulingLoop, TelemetryColumns]:
    """A loop of ``episodes`` replay episodes of ``scenario``, reset on seeds 0, 1, ..."""
    loop = SchedulingLoop(make_backend("replay").episode_batch(scenario, episodes), placer)
    every = np.ones(episodes, dtype=bool)
    columns = loop.reset(every, [np.random.default_rng(seed) for seed in range(episodes)])
    return loop, columns


def step(
    loop: SchedulingLoop,
    limit: float | np.ndarray = 0.5,
    migrations: Sequence[Sequence[Migration]] | None = None,
    live: np.ndarray | None = None,
) -> TelemetryColumns:
    """One step of the ``live`` rows (all by default) at ``limit`` in every slot, measured as
    an environment measures it."""
    episodes = loop.episodes
    rows = np.ones(episodes, dtype=bool) if live is None else live
    limits = np.broadcast_to(limit, (episodes, loop.batch.workers * SLOTS)).astype(np.float64)
    loop.step(limits, migrations, rows)
    return loop.measure(rows, loop.scenario.interval_s)


def job_index(columns: TelemetryColumns, job_id: str, row: int = 0) -> int:
    return next(j for j, spec in enumerate(columns.specs[row]) if spec.job_id == job_id)


class Recording(Placer):
    """Places every job on the lowest candidate (``highest``: the highest), where spread takes
    the worker with the fewest jobs, and records each call's job, time and candidates."""

    def __init__(self, highest: bool = False) -> None:
        self.choose = max if highest else min
        self.calls: list[tuple[str, float, tuple[int, ...]]] = []

    def place(self, job: JobSpec, telemetry: Telemetry, candidates: Sequence[int]) -> int:
        self.calls.append((job.job_id, telemetry.time_s, tuple(candidates)))
        return self.choose(candidates)


class OutOfRange(Placer):
    def place(self, job: JobSpec, telemetry: Telemetry, candidates: Sequence[int]) -> int:
        return 7


#: Two services at 0 s and one at 15 s on three workers: spread puts one on each worker.
THREE_WORKERS = services(resnets(2), resnets(1, 15.0), workers=3)


# ------------------------------------------------------------------ reset


def test_reset_deals_the_jobs_of_time_zero_round_the_workers_uncapped():
    loop, columns = started(CROWDED)
    first = [job_index(columns, job) for job in ("j00", "j01", "j02")]
    assert columns.time_s.tolist() == [0.0]
    assert columns.active[0, first].all()
    assert columns.worker[0, first].tolist() == [0, 1, 0]
    assert columns.slot[0, first].tolist() == [0, 0, 1]
    assert columns.limit[0, first].tolist() == [1.0, 1.0, 1.0]
    # the later arrivals are not in the telemetry yet
    assert columns.present[0].sum() == 3
    assert {job.job_id for job in loop.telemetry(0).jobs} == {"j00", "j01", "j02"}


def test_reset_draws_the_jobs_from_the_episode_generator_it_is_given():
    scenario = services(
        JobGroup(
            ("resnet50",),
            count=4,
            arrival=ArrivalPattern(ArrivalKind.RANDOM, window_s=50.0),
            targets_s=(20.0,),
        )
    )
    _, columns = started(scenario, episodes=2)
    for seed in (0, 1):
        jobs_rng, _ = episode_generators(np.random.default_rng(seed))
        assert columns.specs[seed] == scenario.realise(jobs_rng)
    assert columns.specs[0] != columns.specs[1]


def test_reset_of_some_rows_starts_them_again_and_leaves_the_others():
    loop, _ = started(CROWDED, episodes=2)
    step(loop)
    step(loop)
    columns = loop.reset(np.array([False, True]), [np.random.default_rng(1)])
    assert columns.time_s.tolist() == [20.0, 0.0]
    assert columns.present.sum(axis=1).tolist() == [4, 3]  # row 0 still has its arrival at 15 s
    assert columns.limit[1][columns.active[1]].tolist() == [1.0, 1.0, 1.0]


def test_a_scenario_pinning_jobs_to_a_worker_fills_it_and_the_rest_wait():
    loop, columns = started(services(resnets(3, worker=1)))
    assert columns.worker[0][columns.active[0]].tolist() == [1, 1]
    assert columns.waiting[0].sum() == 1  # worker 0 is free, but not theirs
    assert loop.telemetry(0).on_worker(0) == ()


# ------------------------------------------------------------------ a step


def test_a_step_gives_each_slot_its_limit_and_measures_the_cpu_over_the_step():
    loop, _ = started(CROWDED, episodes=1)
    step(loop, 1.0)  # 0-10 s: the services start up
    by_slot = np.array([0.25, 0.5, 0.75, 0.9])  # worker 0 slots 0-1, worker 1 slots 0-1
    columns = step(loop, by_slot)  # 10-20 s (j03 arrives at 15 s, into worker 1's slot 1)
    assert columns.time_s.tolist() == [20.0]
    for job in ("j00", "j01", "j02"):
        j = job_index(columns, job)
        slot = columns.worker[0, j] * SLOTS + columns.slot[0, j]
        assert columns.limit[0, j] == by_slot[slot]
        # ResNet-50 wants more than its cap: it uses the cap, over the whole step
        assert columns.cpu_usage[0, j] == pytest.approx(by_slot[slot] * 4.0)
    # worker 1's second slot was empty when the limits were given: j03 took it uncapped
    late = job_index(columns, "j03")
    assert (columns.worker[0, late], columns.slot[0, late]) == (1, 1)
    assert columns.limit[0, late] == 1.0


def test_a_step_of_some_rows_leaves_the_others_as_they_were():
    loop, before = started(CROWDED, episodes=2)
    columns = step(loop, 0.3, live=np.array([True, False]))
    assert columns.time_s.tolist() == [10.0, 0.0]
    assert (columns.limit[0][columns.active[0]] == 0.3).all()
    assert (columns.limit[1][columns.active[1]] == 1.0).all()
    np.testing.assert_array_equal(columns.units[1], before.units[1])


def test_an_arrival_within_a_step_is_placed_at_its_arrival_time_uncapped():
    placer = Recording(highest=True)
    loop, _ = started(THREE_WORKERS, placer=placer)
    assert placer.calls == [("j00", 0.0, (0, 1, 2)), ("j01", 0.0, (0, 1, 2))]  # both on 2
    step(loop, 0.5)
    columns = step(loop, 0.5)  # 10-20 s
    j = job_index(columns, "j02")
    assert placer.calls[2:] == [("j02", 15.0, (0, 1))]  # at its arrival, worker 2 full
    assert columns.active[0, j] and columns.worker[0, j] == 1
    assert columns.limit[0, j] == 1.0  # placed after the step's limits were given
    assert columns.age_s[0, j] == 5.0
    columns = step(loop, 0.5)
    assert columns.limit[0, j] == 0.5


def test_the_spread_places_an_arrival_on_the_worker_with_the_fewest_jobs():
    loop, _ = started(CROWDED)
    step(loop)
    columns = step(loop)  # j03 arrives at 15 s: worker 0 holds two, worker 1 one
    j = job_index(columns, "j03")
    assert (columns.worker[0, j], columns.slot[0, j]) == (1, 1)


def test_arrivals_that_find_every_slot_taken_wait():
    loop, _ = started(CROWDED)
    for _ in range(3):
        columns = step(loop)  # at 25 s, j04 and j05 arrive to four full slots
    waiting = [job_index(columns, job) for job in ("j04", "j05")]
    assert columns.waiting[0, waiting].all() and not columns.active[0, waiting].any()
    assert columns.present[0, waiting].all()
    telemetry = loop.telemetry(0)
    assert telemetry.job("j04").state is JobState.WAITING


def test_a_job_that_ends_frees_its_slot_for_a_waiting_one():
    loop, columns = started(TRAININGS)
    third = job_index(columns, "j02")
    assert columns.waiting[0, third]
    freed = None
    for _ in range(20):
        columns = step(loop, 1.0)
        done = np.flatnonzero(columns.done[0])
        if done.size:
            freed = (int(columns.worker[0, done[0]]), int(columns.slot[0, done[0]]))
            break
    assert freed is not None, "no training finished in 200 s"
    assert columns.active[0, third] and not columns.waiting[0, third]
    assert (int(columns.worker[0, third]), int(columns.slot[0, third])) == freed


def test_a_placer_given_for_one_episode_places_only_that_episode():
    loop, _ = started(THREE_WORKERS, episodes=2)
    loop.set_placer(1, Recording())
    step(loop)
    columns = step(loop)
    j = job_index(columns, "j02")
    assert columns.worker[:, j].tolist() == [2, 0]  # spread's empty worker; the lowest


def test_a_placer_choosing_a_worker_it_was_not_offered_is_an_action_error():
    with pytest.raises(ActionError, match=r"OutOfRange chose worker 7 for 'j00'; expected one of"):
        started(THREE_WORKERS, placer=OutOfRange())


# ------------------------------------------------------------------ migrations


def test_a_migration_moves_a_running_job_to_a_free_slot_and_keeps_its_progress():
    loop, _ = started(services(resnets(3)))
    before = step(loop)
    j = job_index(before, "j02")  # on worker 0; worker 1 has a free slot
    units = int(before.units[0, j])
    columns = step(loop, migrations=[[Migration("j02", 1)]])
    assert (columns.worker[0, j], columns.slot[0, j]) == (1, 1)
    assert columns.units[0, j] >= units


def test_a_migration_to_the_worker_a_job_is_on_changes_nothing():
    loop, _ = started(services(resnets(3)))
    before = step(loop)
    columns = step(loop, migrations=[[Migration("j00", 0)]])
    j = job_index(columns, "j00")
    assert (columns.worker[0, j], columns.slot[0, j]) == (before.worker[0, j], before.slot[0, j])
    assert not columns.migrating[0, j]


@pytest.mark.parametrize(
    ("migration", "refusal"),
    [
        (Migration("nope", 1), r"migration of unknown job 'nope' \(environment 1\); jobs present"),
        (Migration("j02", 2), r"'j02' to worker 2 \(environment 1\); workers are 0\.\.1"),
        # the slot the first migration took is no longer free
        (Migration("j02", 1), r"'j02' to worker 1 \(environment 1\), which has no free slot"),
    ],
)
def test_a_refused_migration_is_an_action_error_and_changes_nothing(migration, refusal):
    loop, _ = started(services(resnets(3)), episodes=2)  # j00, j02 on worker 0; j01 on 1
    before = step(loop)
    allowed = Migration("j00", 1)  # to worker 1's free slot: allowed alone
    with pytest.raises(ActionError, match=refusal):
        step(loop, migrations=[[allowed], [allowed, migration]])
    columns = step(loop)
    np.testing.assert_array_equal(columns.worker, before.worker)
    np.testing.assert_array_equal(columns.slot, before.slot)
    columns = step(loop, migrations=[[], [allowed]])  # the slot it had taken is free again
    j = job_index(columns, "j00")
    assert columns.worker[:, j].tolist() == [0, 1]


def test_a_waiting_job_cannot_migrate():
    loop, _ = started(CROWDED)
    for _ in range(3):
        step(loop)  # 30 s: j04 and j05 wait for a slot
    with pytest.raises(ActionError, match=r"cannot migrate job 'j04' in state waiting; only"):
        step(loop, migrations=[[Migration("j04", 1)]])


# ------------------------------------------------------------------ ends and errors


def test_a_service_episode_is_truncated_at_its_horizon_never_terminated():
    loop, _ = started(CROWDED, episodes=2)
    every = np.ones(2, dtype=bool)
    for _ in range(5):
        step(loop)
        terminated, truncated = loop.ends(every)
        assert not terminated.any() and not truncated.any()
    step(loop)  # 60 s, the horizon
    terminated, truncated = loop.ends(every)
    assert not terminated.any() and truncated.all()
    assert loop.ends(np.array([True, False]))[1].tolist() == [True, False]


def test_a_training_episode_terminates_when_every_job_has_arrived_and_ended():
    loop, _ = started(TRAININGS)
    every = np.ones(1, dtype=bool)
    for _ in range(600):
        columns = step(loop, 1.0)
        terminated, truncated = loop.ends(every)
        assert not truncated.any()
        if terminated.all():
            break
        assert not columns.done[0].all() or columns.waiting[0].any()
    assert terminated.all()
    assert columns.done[0].all() and not columns.active[0].any()
    assert columns.time_s[0] < TRAININGS.horizon_s


def test_a_training_job_arriving_later_keeps_the_episode_going():
    scenario = Scenario(
        name="loop-late-training",
        kind=JobKind.TRAINING,
        workers=(WorkerSpec(4.0),),
        groups=(
            JobGroup(("mnist-pytorch",), count=1, iterations=10),
            JobGroup(
                ("mnist-pytorch",),
                count=1,
                iterations=10,
                arrival=ArrivalPattern(ArrivalKind.EXPLICIT, times_s=(200.0,)),
            ),
        ),
        interval_s=10.0,
        horizon_s=6000.0,
        slots_per_worker=SLOTS,
    )
    loop, _ = started(scenario)
    every = np.ones(1, dtype=bool)
    for _ in range(19):  # the first ends well before 190 s; the second has not arrived
        columns = step(loop, 1.0)
    assert columns.done[0, 0] and not columns.present[0, 1]
    assert not loop.ends(every)[0].any()


def test_reading_telemetry_before_a_reset_is_an_error():
    loop = SchedulingLoop(make_backend("replay").episode_batch(CROWDED, 1))
    assert loop.columns is None
    with pytest.raises((RuntimeError, gym.error.ResetNeeded)):
        loop.telemetry(0)
