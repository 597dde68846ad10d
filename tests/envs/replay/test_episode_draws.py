"""The draws of an episode's jobs read without running it: the numbers the episode runs by."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium.utils import seeding
from mlp_crowds import mlp_crowd
from scenario_factories import jobs_alone

from dlsched.envs.loop import episode_generators
from dlsched.envs.replay.episode_draws import JobDraws, job_draws
from dlsched.envs.replay.profile import load_profile_set
from dlsched.envs.scenarios.model import JobKind, JobSpec, Scenario
from dlsched.envs.training_env import TrainingVectorEnv

SEED = 31


def _apart(kind: JobKind, workload: str) -> Scenario:
    """Three jobs of ``workload`` arriving 50 s apart on three 8-core workers: the spread puts
    each on a worker of its own, where it runs alone at its profile's full pace."""
    target_s = 30.0 if kind is JobKind.INFERENCE else None
    return jobs_alone(
        kind, workload, (0.0, 50.0, 100.0), target_s=target_s, slots_per_worker=2, horizon_s=400.0
    )


def _draws(scenario: Scenario, seed: int) -> tuple[tuple[JobSpec, ...], tuple[JobDraws, ...]]:
    rng, _ = seeding.np_random(seed)
    jobs_rng, backend_rng = episode_generators(rng)
    jobs = scenario.realise(jobs_rng)
    return jobs, job_draws(scenario, jobs, backend_rng)


def _uncapped(scenario: Scenario, env_id: str, seed: int) -> list:
    """Every step's telemetry of ``scenario`` with every limit at 1."""
    env = gym.make(env_id, scenario=scenario)
    _, info = env.reset(seed=seed)
    seen = [info["telemetry"]]
    done = False
    while not done:
        _, _, terminated, truncated, info = env.step(np.ones(env.action_space.shape))
        seen.append(info["telemetry"])
        done = terminated or truncated
    env.close()
    return seen


def test_a_service_alone_answers_each_batch_in_its_drawn_work_at_full_pace() -> None:
    scenario = _apart(JobKind.INFERENCE, "resnet50")
    profile = load_profile_set("paper")["resnet50"]
    pace = float(profile.units_per_s(profile.demand_cores))
    jobs, draws = _draws(scenario, SEED)
    works = {draw.job_id: np.diff(draw.unit_bounds, prepend=0.0) for draw in draws}
    checked = 0
    for telemetry in _uncapped(scenario, "dlsched/Inference-v0", SEED):
        for job in telemetry.active_jobs:
            if job.batches:
                assert job.latency_s is not None
                expected = works[job.job_id][job.batches - 1] / pace
                assert np.isclose(job.latency_s, expected, rtol=1e-9), (job.job_id, job.batches)
                checked += 1
    assert checked > 50
    # the noise is drawn: batches differ, so a stream read out of order would show
    assert len({round(float(w), 9) for w in works[jobs[0].job_id][:10]}) == 10


def test_a_training_job_alone_finishes_its_drawn_work_at_full_pace() -> None:
    scenario = _apart(JobKind.TRAINING, "vae")
    profile = load_profile_set("paper")["vae"]
    pace = float(profile.units_per_s(profile.demand_cores))
    jobs, draws = _draws(scenario, SEED)
    final = _uncapped(scenario, "dlsched/Training-v0", SEED)[-1]
    for job, draw in zip(jobs, draws, strict=True):
        done = final.job(job.job_id).completed_s
        assert done is not None
        expected = job.arrival_s + profile.startup_s + float(draw.unit_bounds[-1]) / pace
        assert np.isclose(done, expected, rtol=1e-9), job.job_id
    assert len({float(draw.unit_bounds[-1]) for draw in draws}) == 3  # each its own noise


def test_a_crowded_job_races_at_the_levels_its_draws_give() -> None:
    scenario = mlp_crowd("measured-stock", 3, 600)
    _, draws = _draws(scenario, SEED)
    assert all(len(draw.race_levels) > 1 for draw in draws)
    env = TrainingVectorEnv(num_envs=1, scenario=scenario)
    env.reset(seed=SEED)
    physics = env._loop.batch.physics
    compared: set[tuple[int, float]] = set()  # (job, level) pairs seen
    ended = False
    while not ended:
        _, _, terminated, truncated, _ = env.step(np.ones(env.action_space.shape))
        ended = bool(terminated[0] or truncated[0])  # the next step would start another episode
        now = float(env._loop.batch.now[0])
        for job, draw in enumerate(draws):
            if not physics.race_active[0, job]:
                continue  # its level is brought up to date only when it changes its pace
            level = draw.race_levels[np.searchsorted(draw.race_starts_s, now, side="right") - 1]
            assert physics.race_level[0, job] == level, (job, now)
            compared.add((job, float(level)))
    env.close()
    assert len({job for job, _ in compared}) == 3
    assert len({level for _, level in compared}) > 1  # switches seen, not only the first level
