"""The replay backend: CPU sharing, integrated progress, lagging latency, migration, noise."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from dlsched.envs.backend_registry import make_backend
from dlsched.envs.controlled_episode import ControlledEpisode
from dlsched.envs.decision import Placement
from dlsched.envs.errors import ActionError, BackendError, ScenarioError, UnknownNameError
from dlsched.envs.replay.backend import ReplayBackend
from dlsched.envs.replay.profile import load_profile_set
from dlsched.envs.scenarios import load_scenario
from dlsched.envs.scenarios.model import JobGroup, JobKind, JobSpec, Scenario, WorkerSpec
from dlsched.envs.telemetry import JobState, JobTelemetry, QoEClass, Telemetry

PROVENANCE = {
    "source": "unit test",
    "method": "written by hand",
    "host": "none",
    "date": "2025-06-01",
    "derivation": "round numbers that make expected times exact",
}


@pytest.fixture
def linear_set(tmp_path: Path) -> str:
    """A profile set with noiseless, linear workloads, so expected times are exact.

    ``serve``: a batch is 10 core-seconds, no start-up. ``serve-slow-start``: the same after a
    2 s start-up; ``serve-cpu-start``: after a start-up of 2 CPU-seconds on one core.
    ``train``: an iteration is 1 core-second, 100 iterations, loss 100/(1+i).
    """

    common = {"format": 1, "noise_cv": 0.0, "provenance": PROVENANCE, "demand_cores": 8.0}

    def linear(kind: str, unit: str, batch_size: int, units_per_s: list[float], **more: Any):
        """A profile of ``units_per_s`` on 1 core and on its demand, 8, with no start-up."""
        throughput = {"cores": [1.0, 8.0], "units_per_s": units_per_s}
        fields = {"kind": kind, "unit": unit, "batch_size": batch_size, "throughput": throughput}
        return {**common, **fields, "startup_s": 0.0, **more}

    serve = linear("inference", "batch", 100, [0.1, 0.8])
    loss_curve = {
        "iterations": [float(i) for i in range(0, 101)],
        "loss": [100.0 / (1 + i) for i in range(0, 101)],
    }
    train = linear("training", "iteration", 64, [1.0, 8.0], iterations=100, loss_curve=loss_curve)
    profiles: dict[str, dict[str, Any]] = {
        "serve": serve,
        "serve-slow-start": {**serve, "startup_s": 2.0},
        "serve-cpu-start": {
            **serve,
            "format": 2,
            "threading": "tuned",
            "startup_s": 2.0,
            "startup_cpu_s": 2.0,
        },
        "train": train,
    }
    for name, profile in profiles.items():
        (tmp_path / f"{name}.json").write_text(json.dumps({**profile, "workload": name}))
    return str(tmp_path)


def scenario(
    kind: JobKind,
    workers: int = 1,
    cores: float = 8.0,
    profile_set: str = "paper",
    migration_cost_s: float = 10.0,
) -> Scenario:
    return Scenario(
        name="test",
        kind=kind,
        workers=tuple(WorkerSpec(cores) for _ in range(workers)),
        groups=(),
        interval_s=10.0,
        horizon_s=10_000.0,
        slots_per_worker=12,
        profile_set=profile_set,
        migration_cost_s=migration_cost_s,
    )


def serving(count: int, workload: str = "resnet50", target_s: float = 20.0) -> list[JobSpec]:
    return [
        JobSpec(f"j{i:02d}", workload, JobKind.INFERENCE, 0.0, target_s=target_s)
        for i in range(count)
    ]


def training(workloads: Sequence[str], iterations: Sequence[int | None] = ()) -> list[JobSpec]:
    counts = list(iterations) or [None] * len(workloads)
    return [
        JobSpec(f"j{i:02d}", workload, JobKind.TRAINING, 0.0, iterations=count)
        for i, (workload, count) in enumerate(zip(workloads, counts, strict=True))
    ]


def episode(scen: Scenario, **options: Any) -> ControlledEpisode:
    """A controlled episode of ``scen`` on a replay backend of ``options``."""
    return ControlledEpisode(ReplayBackend(**options), scen)


def started(
    scen: Scenario, jobs: Sequence[JobSpec], limit: float = 1.0, seed: int = 0, **options: Any
) -> ControlledEpisode:
    """An episode with every job placed on worker 0 at time 0 under ``limit``."""
    backend = episode(scen, **options)
    backend.reset(jobs, np.random.default_rng(seed))
    backend.place([Placement(job.job_id, 0, slot) for slot, job in enumerate(jobs)])
    backend.set_limits({job.job_id: limit for job in jobs})
    return backend


def run_until_done(backend: ControlledEpisode, step_s: float = 10.0) -> Telemetry:
    telemetry = backend.advance(0.0)
    while any(job.state is not JobState.DONE for job in telemetry.jobs):
        assert telemetry.time_s < 100_000, "jobs never finished"
        telemetry = backend.advance(step_s)
    return telemetry


# ------------------------------------------------------------------------------- basics


def test_registered_name_and_flags() -> None:
    backend = make_backend("replay")
    assert isinstance(backend, ReplayBackend)
    assert backend.name == "replay"
    assert backend.capabilities.deterministic is True
    assert backend.capabilities.batchable is True


def test_reset_places_nothing() -> None:
    backend = episode(scenario(JobKind.INFERENCE))
    telemetry = backend.reset(serving(3), np.random.default_rng(0))
    assert telemetry.time_s == 0.0
    assert telemetry.jobs == ()
    assert [w.cores for w in telemetry.workers] == [8.0]
    assert backend.advance(30.0).jobs == ()
    backend.reset([], np.random.default_rng(0))
    backend.set_limits({})
    assert backend.advance(10.0).time_s == 10.0


def test_telemetry_reports_placement_limit_age_and_usage(linear_set: str) -> None:
    jobs = [JobSpec("j00", "serve-slow-start", JobKind.INFERENCE, 0.0, target_s=9.0)]
    backend = started(scenario(JobKind.INFERENCE, profile_set=linear_set), jobs, limit=0.125)
    first = backend.advance(10.0).job("j00")
    # 2 s of start-up without demand, then 8 s at 1 core.
    assert first.cpu_usage == pytest.approx(0.8)
    assert first.cpu_seconds == pytest.approx(8.0)
    assert (first.worker, first.slot, first.limit, first.age_s) == (0, 0, 0.125, 10.0)
    assert first.state is JobState.RUNNING
    assert (first.target_s, first.tolerance) == (9.0, 0.1)
    second = backend.advance(10.0)
    assert second.job("j00").cpu_usage == pytest.approx(1.0)
    assert second.job("j00").cpu_seconds == pytest.approx(18.0)
    assert second.workers[0].cpu_usage == pytest.approx(1.0)
    # A call that lets no time pass keeps the last measured usage.
    assert backend.advance(0.0).job("j00").cpu_usage == pytest.approx(1.0)


def test_limit_and_demand_share_the_worker_like_cfs() -> None:
    # Uncapped demands 2.6 (gru), 3.0 (lstm), 6.0 (mnist-pytorch) on 8 cores: gru gets its
    # demand, the other two split the remaining 5.4 evenly.
    backend = started(scenario(JobKind.TRAINING), training(["gru", "lstm", "mnist-pytorch"]))
    backend.advance(10.0)  # past every start-up
    usage = {job.workload: job.cpu_usage for job in backend.advance(10.0).jobs}
    assert usage == pytest.approx({"gru": 2.6, "lstm": 2.7, "mnist-pytorch": 2.7})
    backend.set_limits({"j02": 0.25})  # cap mnist-pytorch at 2 cores: lstm gets its full 3
    usage = {job.workload: job.cpu_usage for job in backend.advance(10.0).jobs}
    assert usage == pytest.approx({"gru": 2.6, "lstm": 3.0, "mnist-pytorch": 2.0})


# ------------------------------------------------------------------------------- progress


def test_twice_the_cpu_finishes_in_half_the_time() -> None:
    startup = load_profile_set("paper")["mnist-pytorch"].startup_s
    times = {}
    for cores in (0.5, 1.0):  # both below the demand of 6 cores, and on the linear part
        backend = started(scenario(JobKind.TRAINING), training(["mnist-pytorch"]), cores / 8)
        done = run_until_done(backend).job("j00")
        assert done.completed_s is not None
        times[cores] = done.completed_s - startup
    # Same seed, same per-iteration work: the compute time halves exactly.
    assert times[1.0] == pytest.approx(times[0.5] / 2, rel=1e-9)
    # And is about what the profile says: 300 iterations of 2.42 core-seconds.
    assert times[1.0] == pytest.approx(725.8, rel=0.02)


def test_more_cores_help_sublinearly_above_one_core() -> None:
    times = {}
    for cores in (2.0, 4.0):
        backend = started(scenario(JobKind.TRAINING), training(["mnist-pytorch"]), cores / 8)
        completed = run_until_done(backend).job("j00").completed_s
        assert completed is not None
        times[cores] = completed
    assert 1.5 < times[2.0] / times[4.0] < 2.0


def test_finished_job_frees_its_cores_at_the_instant_it_finishes(linear_set: str) -> None:
    # Two jobs share 2 cores (1 each): j00 ends at 50 s; j01 then has 50 iterations left at
    # 2 iterations per second, so it ends at exactly 75 s.
    scen = scenario(JobKind.TRAINING, cores=2.0, profile_set=linear_set)
    backend = started(scen, training(["train", "train"], [50, 100]))
    telemetry = backend.advance(60.0)
    first = telemetry.job("j00")
    assert first.state is JobState.DONE
    assert first.completed_s == pytest.approx(50.0, abs=1e-9)
    assert (first.iterations, first.total_iterations) == (50, 50)
    assert (first.worker, first.slot) == (0, 0)  # stays in telemetry with its last place
    assert first.cpu_usage == pytest.approx(50.0 / 60.0)
    assert telemetry.job("j01").iterations == 70
    final = run_until_done(backend, step_s=5.0).job("j01")
    assert final.completed_s == pytest.approx(75.0, abs=1e-9)
    # Its slot is free for the next job.
    backend.reset(training(["train", "train"], [50, 10]), np.random.default_rng(0))
    backend.place([Placement("j00", 0, 0)])
    backend.advance(60.0)
    backend.place([Placement("j01", 0, 0)])
    assert backend.advance(1.0).job("j01").state is JobState.RUNNING


def test_training_runs_the_iterations_the_scenario_sets() -> None:
    backend = started(scenario(JobKind.TRAINING), training(["mnist-tensorflow"], [7]))
    done = run_until_done(backend).job("j00")
    assert (done.iterations, done.total_iterations) == (7, 7)


def test_loss_follows_the_profile_curve(linear_set: str) -> None:
    curve = load_profile_set("paper")["vae"]
    backend = started(scenario(JobKind.TRAINING), training(["vae"]))
    job = backend.advance(60.0).job("j00")
    assert job.loss is not None and job.iterations > 0
    # Lognormal noise of CV 0.01: five standard deviations.
    assert job.loss == pytest.approx(curve.loss_at(job.iterations), rel=0.05)
    assert job.loss != curve.loss_at(job.iterations)
    exact = started(
        scenario(JobKind.TRAINING, profile_set=linear_set), training(["train"]), loss_noise_cv=0.0
    )
    job = exact.advance(10.5).job("j00")  # 8 cores, 8 iterations per second
    assert job.iterations == 84
    assert job.loss == pytest.approx(100.0 / 85)


def test_inference_runs_until_told_otherwise() -> None:
    backend = started(scenario(JobKind.INFERENCE), serving(1, "nasnetmobile"))
    job = backend.advance(5000.0).job("j00")
    assert job.state is JobState.RUNNING
    assert job.batches > 1000
    assert job.total_iterations is None and job.iterations == 0 and job.loss is None


# ------------------------------------------------------------------------------- latency


def test_no_measurement_before_the_first_unit() -> None:
    # resnet50 starts up for 5 s, then a batch takes about 31.6 s on 0.8 cores.
    backend = started(scenario(JobKind.INFERENCE), serving(1), limit=0.1)
    job = backend.advance(0.0).job("j00")
    assert (job.latency_s, job.batches, job.quality_s, job.qoe_class) == (None, 0, None, None)
    assert backend.advance(4.0).job("j00").cpu_usage == 0.0  # still starting up
    assert backend.advance(31.0).job("j00").latency_s is None
    measured = backend.advance(3.0).job("j00")
    assert measured.batches == 1
    assert measured.latency_s == pytest.approx(31.61, rel=0.05)

    trainer = started(scenario(JobKind.TRAINING), training(["lstm"]), limit=0.05)
    # Start-up is 6 s, then an iteration of 2.42 core-seconds takes 6.05 s on 0.4 cores.
    job = trainer.advance(11.5).job("j00")
    assert (job.loss, job.iterations) == (None, 0)
    assert trainer.advance(1.0).job("j00").loss is not None


def test_startup_delays_the_first_unit_but_is_not_latency(linear_set: str) -> None:
    jobs = [JobSpec("j00", "serve-slow-start", JobKind.INFERENCE, 0.0, target_s=10.0)]
    backend = started(scenario(JobKind.INFERENCE, profile_set=linear_set), jobs, limit=0.125)
    assert backend.advance(11.9).job("j00").latency_s is None
    job = backend.advance(0.2).job("j00")  # first batch: 2 s start-up + 10 s at 1 core
    assert job.latency_s == pytest.approx(10.0)
    assert job.qoe_class is not None


def test_latency_lags_a_limit_change(linear_set: str) -> None:
    jobs = [JobSpec("j00", "serve", JobKind.INFERENCE, 0.0, target_s=10.0)]
    backend = started(scenario(JobKind.INFERENCE, profile_set=linear_set), jobs, limit=0.125)
    assert backend.advance(15.0).job("j00").latency_s == pytest.approx(10.0)
    # Halfway through the second batch, halve the CPU: its other 5 core-s take 10 s.
    backend.set_limits({"j00": 0.0625})
    old = backend.advance(9.0).job("j00")
    assert (old.batches, old.latency_s) == (1, pytest.approx(10.0))  # still the old batch
    new = backend.advance(1.0).job("j00")
    assert new.batches == 2
    assert new.latency_s == pytest.approx(15.0)
    assert backend.advance(20.0).job("j00").latency_s == pytest.approx(20.0)


def test_lowering_the_limit_mid_batch_lengthens_that_batch() -> None:
    backend = started(scenario(JobKind.INFERENCE), serving(1), limit=0.1)
    before = backend.advance(5.0 + 31.61 * 1.5).job("j00")
    assert before.batches == 1 and before.latency_s is not None
    backend.set_limits({"j00": 0.05})
    lagging = backend.advance(10.0).job("j00")
    assert lagging.latency_s == before.latency_s
    later = backend.advance(40.0).job("j00")
    assert later.batches == 2 and later.latency_s is not None
    assert 1.3 * before.latency_s < later.latency_s < 1.7 * before.latency_s


def test_ten_resnet50_sharing_eight_cores_evenly() -> None:
    # DQoES journal, Section V-B-1: at 350 s the ten latencies average 31.61 s, std 0.35 s.
    for limit in (0.1, 1.0):  # an even cap, or no cap (each demands more than its 0.8 share)
        backend = started(scenario(JobKind.INFERENCE), serving(10), limit=limit, seed=7)
        backend.advance(340.0)
        telemetry = backend.advance(10.0)
        latencies = np.array([job.latency_s for job in telemetry.jobs], dtype=float)
        assert latencies.mean() == pytest.approx(31.61, abs=0.4)
        assert 0.05 < latencies.std() < 1.0
        assert [job.cpu_usage for job in telemetry.jobs] == pytest.approx([0.8] * 10)
        assert {job.qoe_class for job in telemetry.jobs} == {QoEClass.B}  # target 20 s


# ------------------------------------------------------------------------------- migration


def test_migration_costs_exactly_the_pause_and_keeps_progress() -> None:
    scen = scenario(JobKind.TRAINING, workers=2, migration_cost_s=10.0)
    plain = run_until_done(started(scen, training(["mnist-pytorch"]))).job("j00")

    moved = started(scen, training(["mnist-pytorch"]))
    before = moved.advance(103.3).job("j00")  # mid-iteration
    moved.migrate([Placement("j00", 1, 4)])
    during = moved.advance(5.0).job("j00")
    assert (during.state, during.worker, during.slot) == (JobState.MIGRATING, 1, 4)
    assert during.iterations == before.iterations
    assert during.cpu_usage == 0.0
    assert during.cpu_seconds == before.cpu_seconds
    assert moved.advance(5.0).job("j00").state is JobState.RUNNING
    done = run_until_done(moved).job("j00")
    assert plain.completed_s is not None and done.completed_s is not None
    assert done.completed_s - plain.completed_s == pytest.approx(10.0, abs=1e-9)
    assert done.cpu_seconds == pytest.approx(plain.cpu_seconds, rel=1e-12)


def test_migrating_a_starting_job_waits_for_the_later_of_startup_and_cost(
    linear_set: str,
) -> None:
    scen = scenario(JobKind.INFERENCE, workers=2, profile_set=linear_set, migration_cost_s=1.0)
    jobs = [JobSpec("j00", "serve-slow-start", JobKind.INFERENCE, 0.0, target_s=10.0)]
    backend = started(scen, jobs, limit=0.125)
    backend.migrate([Placement("j00", 1, 0)])
    job = backend.advance(12.0).job("j00")  # start-up (2 s) outlasts the 1 s cost
    assert job.latency_s == pytest.approx(10.0)
    assert job.worker == 1


def test_a_job_migrated_while_its_start_up_runs_on_the_cpu_finishes_it_after_the_pause(
    linear_set: str,
) -> None:
    scen = scenario(JobKind.INFERENCE, workers=2, profile_set=linear_set, migration_cost_s=1.0)
    jobs = [JobSpec("j00", "serve-cpu-start", JobKind.INFERENCE, 0.0, target_s=10.0)]
    backend = started(scen, jobs, limit=0.125)  # one core: the start-up takes 2 s
    backend.migrate([Placement("j00", 1, 0)])
    # 1 s of migration, the 2 s start-up, then a 10 s batch on one core.
    assert backend.advance(12.9).job("j00").batches == 0
    job = backend.advance(0.2).job("j00")
    assert job.batches == 1 and job.latency_s == pytest.approx(10.0)
    assert job.worker == 1


def test_a_slot_stays_taken_while_its_job_starts_up_on_the_cpu(linear_set: str) -> None:
    group = JobGroup(workloads=("serve-cpu-start",), count=2, targets_s=(10.0,))
    scen = dataclasses.replace(
        scenario(JobKind.INFERENCE, profile_set=linear_set),
        groups=(group,),
        slots_per_worker=1,
        interval_s=1.0,
    )
    env = gym.make("dlsched/Inference-v0", scenario=scen)
    _, info = env.reset(seed=0)
    assert [job.state for job in info["telemetry"].jobs] == [JobState.RUNNING, JobState.WAITING]
    for _ in range(2):  # 2 CPU-seconds of start-up on a core: still starting after 1 s
        *_, info = env.step(np.array([0.125], np.float32))
        assert [job.state for job in info["telemetry"].jobs] == [
            JobState.RUNNING,
            JobState.WAITING,
        ]
        assert info["telemetry"].jobs[0].batches == 0


# ------------------------------------------------------------------------------- noise


def _episode(seed: int) -> list[Telemetry]:
    backend = started(scenario(JobKind.INFERENCE), serving(4, "xception"), 0.2, seed=seed)
    snapshots = []
    for step in range(30):
        backend.set_limits({"j01": 0.1 + 0.02 * (step % 5)})
        snapshots.append(backend.advance(10.0))
    return snapshots


def test_same_seed_same_telemetry_other_seed_other_telemetry() -> None:
    assert _episode(3) == _episode(3)
    first, other = _episode(3)[-1], _episode(4)[-1]
    assert [j.latency_s for j in first.jobs] != [j.latency_s for j in other.jobs]


def test_training_noise_is_seeded_too() -> None:
    def completion(seed: int) -> list[float | None]:
        backend = started(scenario(JobKind.TRAINING), training(["gru", "vae"]), seed=seed)
        return [job.completed_s for job in run_until_done(backend).jobs]

    assert completion(1) == completion(1)
    assert completion(1) != completion(2)


def test_how_time_is_split_does_not_change_the_outcome() -> None:
    whole = started(scenario(JobKind.INFERENCE), serving(3, "vgg16"), 0.1, seed=5)
    pieces = started(scenario(JobKind.INFERENCE), serving(3, "vgg16"), 0.1, seed=5)
    at_once = whole.advance(400.0)
    for _ in range(40):
        stepped = pieces.advance(10.0)
    assert [j.batches for j in stepped.jobs] == [j.batches for j in at_once.jobs]
    assert [j.latency_s for j in stepped.jobs] == pytest.approx(
        [j.latency_s for j in at_once.jobs], rel=1e-12
    )


# ------------------------------------------------------------------------------- errors


def test_bad_constructor_argument() -> None:
    with pytest.raises(BackendError, match=r"loss_noise_cv=-0\.1"):
        ReplayBackend(loss_noise_cv=-0.1)


def test_reset_rejects_unknown_workloads_and_kind_mismatches() -> None:
    backend = episode(scenario(JobKind.INFERENCE))
    rng = np.random.default_rng(0)
    with pytest.raises(UnknownNameError, match=r"'resnet5'.*Did you mean 'resnet50'"):
        backend.reset(serving(1, "resnet5"), rng)
    with pytest.raises(ScenarioError, match="'vae' is a training profile"):
        backend.reset(serving(1, "vae"), rng)


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        ("set_limits", {"j00": 0.5, "j09": 0.5}),
        ("place", [Placement("j01", 0, 1), Placement("j09", 0, 2)]),
        ("migrate", [Placement("j09", 1, 0)]),
    ],
)
def test_a_controlled_episode_refuses_a_job_it_has_not(call: str, argument: Any) -> None:
    """A measurement learns of a job that is not there, and nothing of its call changes."""
    backend = episode(scenario(JobKind.INFERENCE, workers=2))
    backend.reset(serving(2), np.random.default_rng(0))
    backend.place([Placement("j00", 0, 0)])
    with pytest.raises(ActionError, match=r"unknown job 'j09'; jobs of this episode: \['j00'"):
        getattr(backend, call)(argument)
    telemetry = backend.advance(1.0)
    assert [(job.job_id, job.limit, job.worker, job.slot) for job in telemetry.jobs] == [
        ("j00", 1.0, 0, 0)
    ]


def test_measurements_built_without_init_are_whole_and_equal_to_constructed_ones() -> None:
    """The env's copies (with_cpu_usage) and the backend's fast construction (from_fields) hold
    every field, as JobTelemetry(...) does: a field left out would read its class default."""
    env = gym.make("dlsched/Training-v0", scenario=load_scenario("flowcon-10-random"))
    env.reset(seed=2)
    for _ in range(12):
        _, _, _, _, info = env.step(np.full(env.action_space.shape, 0.3, np.float32))
    backend = started(scenario(JobKind.TRAINING), training(["gru", "vae"]))
    names = [field.name for field in dataclasses.fields(JobTelemetry)]
    jobs = [*info["telemetry"].jobs, *backend.advance(30.0).jobs]
    assert any(job.loss is not None for job in jobs)
    for job in jobs:
        assert list(vars(job)) == names
        assert job == JobTelemetry(**{name: getattr(job, name) for name in names})
    copy = jobs[0].with_cpu_usage(0.25)
    assert copy == dataclasses.replace(jobs[0], cpu_usage=0.25)
    assert list(vars(copy)) == names
